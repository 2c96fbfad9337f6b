"""Where each value of the Configure form came from, and the model's defaults applied to it.

A value is a default (the demo's own, a real model's, the built-in one), came from a file
(``from real-270m.toml``) or is the user's (``yours``: typed). Picking another model moves
every model-dependent value that is still a default to the new model's default
(``adapters_lib.config.model_defaults``); values from a file or typed stay. The Train page shows
the origin beside each field, the LoRA page under rank and alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters_lib.config import RunConfig
from adapters_lib.config.model_defaults import BUILT_IN, KEYS, default_origin, defaults_for

YOURS = "yours"
LORA_KEYS = ("lora.rank", "lora.alpha")


def is_default(origin: str) -> bool:
    return origin.endswith("default")


@dataclass
class FieldOrigins:
    """``"section.key"`` → (the text the field showed when its origin was set, the origin)."""

    shown: dict[str, tuple[str, str]] = field(default_factory=dict)

    def set(self, key: str, text: str, origin: str) -> None:
        self.shown[key] = (text, origin)

    def origin(self, key: str) -> str:
        return self.shown.get(key, ("", BUILT_IN))[1]

    def seen(self, key: str, text: str) -> bool:
        """The field now shows ``text``: if the user changed it, it is theirs. True when the
        origin changed."""
        before = self.shown.get(key)
        if before is None or before[0] == text or before[1] == YOURS:
            return False
        self.shown[key] = (text, YOURS)
        return True

    def all_from(self, cfg: RunConfig, texts: dict[str, str], origin: str | dict[str, str] | None) -> None:
        """Every field's origin after a fill: ``origin`` for all, each key's own (a dict, as
        ``model_defaults.load_with_model_defaults`` gives them), or the defaults."""
        for key, text in texts.items():
            given = origin.get(key) if isinstance(origin, dict) else origin
            self.set(key, text, given or default_origin(cfg.model.source, key))

    def lora_note(self) -> str:
        parts = [f"{key.split('.')[1]}: {self.origin(key)}" for key in LORA_KEYS]
        return "[dim]" + " · ".join(parts) + "[/]"


def why_note(source: str, origins: FieldOrigins, cfg: RunConfig | None) -> str:
    """The Train page's last line: whose defaults these are (and the hidden one, the dtype)."""
    chosen = defaults_for(source)
    dtype = ""
    if cfg is not None:
        dtype = f" · compute_dtype {cfg.train.compute_dtype} ({origins.origin('train.compute_dtype')})"
    if not any(is_default(origins.origin(key)) for key in KEYS):
        return f"[dim]no value is a default{dtype}[/]"
    return f"[dim]{chosen.origin}s: {chosen.why}{dtype}[/]"


def model_default_updates(source: str, origins: FieldOrigins) -> dict[str, Any]:
    """The keys to move to ``source``'s defaults: those whose value is still a default."""
    from adapters_lib.config.model_defaults import default_value

    return {key: default_value(source, key) for key in KEYS if is_default(origins.origin(key))}
