"""Training defaults that depend on the model, each with where it came from.

``RunConfig()``'s own defaults (lr 1e-3, rank 8, 200 steps, batch 8) are made for the demo
model and its tasks: a tiny model learns them in minutes. A real model trained with them
overshoots (the 270M wrote "redmobilpayassignment…" after 12 steps at 1e-3), so a real model
starts from the LoRA defaults its peers use (Unsloth, PEFT's examples, Axolotl: lr 2e-4,
rank 16, alpha 2×rank), a short run and bf16 matmuls. No JAX; ``load_with_model_defaults``
reads the config file (as ``config.load_config`` does), the rest is pure.

The TUI (Configure) and the CLI (``train``, ``sweep``) apply the same defaults: a key the
config file or ``--set`` names keeps its value; every other model-dependent key gets the
model's default, and each value says where it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from adapters_lib.config.run_config import (
    RunConfig,
    config_from_dict,
    load_config,
    parse_override,
    read_toml,
)


@dataclass(frozen=True)
class ModelDefaults:
    origin: str
    """The words a form shows beside a value that came from here ("real-model default")."""
    why: str
    """One sentence: what these defaults are for and whose they are."""
    values: dict[str, Any] = field(default_factory=dict)
    """``"section.key"`` → value, where these differ from ``RunConfig()``."""


DEMO = ModelDefaults("demo default", "the built-in defaults, made for the demo model and "
                     "its tasks (a tiny model learns them in minutes)")
REAL = ModelDefaults(
    "real-model default",
    "a real model's LoRA defaults, as its peers (Unsloth, PEFT, Axolotl) use them: lr 2e-4, "
    "rank 16, alpha 32; 60 steps of batch 4, bf16 matmuls",
    {"train.learning_rate": 2e-4, "train.warmup_steps": 5, "train.steps": 60,
     "train.batch_size": 4, "train.eval_every": 20, "train.checkpoint_every": 20,
     "train.compute_dtype": "bfloat16", "lora.rank": 16, "lora.alpha": 32.0})
KEYS = tuple(REAL.values)
"""Every key whose default depends on the model."""
BUILT_IN = "built-in default"
"""The origin of a value that is ``RunConfig()``'s and does not depend on the model."""
SET = "--set"
"""The origin of a value given on the command line."""


def defaults_for(source: str) -> ModelDefaults:
    """The demo's own defaults for ``demo``; a real model's for every other source."""
    return DEMO if source.strip() in ("", "demo") else REAL


def default_value(source: str, key: str) -> Any:
    """The default of ``"section.key"`` for the model ``source``."""
    chosen = defaults_for(source)
    if key in chosen.values:
        return chosen.values[key]
    section, name = key.split(".", 1)
    return getattr(getattr(RunConfig(), section), name)


def with_model_defaults(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its model's defaults for every key in ``KEYS`` (use on a default config:
    values set on purpose are not told apart from defaults here)."""
    d = cfg.to_dict()
    for key in KEYS:
        section, name = key.split(".", 1)
        d[section][name] = default_value(cfg.model.source, key)
    return config_from_dict(d, source="model defaults")


def default_origin(source: str, key: str) -> str:
    """The origin of ``key``'s default for the model ``source``."""
    chosen = defaults_for(source)
    if key in chosen.values:
        return chosen.origin
    return DEMO.origin if key in KEYS else BUILT_IN


@dataclass(frozen=True)
class LoadedConfig:
    config: RunConfig
    origins: dict[str, str]
    """``"section.key"`` → where its value came from: ``from FILE``, ``--set`` or a default's
    origin (``real-model default``, ``demo default``, ``built-in default``)."""
    added: tuple[str, ...] = ()
    """The model's defaults this load applied, as ``--set`` items (after the file, before the
    user's ``--set``): what a remote engine must be sent beside the file."""


def load_with_model_defaults(path: str | Path | None,
                             overrides: Sequence[str] = ()) -> LoadedConfig:
    """``config.load_config(path, overrides)``, where a real model gets its defaults for every
    key of ``KEYS`` that neither the file nor ``overrides`` names (the demo keeps
    ``RunConfig()``'s); the origin of every value."""
    raw = read_toml(Path(path).expanduser())[0] if path is not None else {}
    in_file = {f"{section}.{key}" for section, table in raw.items() if isinstance(table, dict)
               for key in table}
    named = {f"{section}.{key}" for section, key, _ in map(parse_override, overrides)}
    cfg = load_config(path, overrides)
    source = cfg.model.source
    added = tuple(f"{key}={_toml_value(value)}" for key, value in defaults_for(source).values.items()
                  if key not in in_file | named)
    if added:
        cfg = load_config(path, [*added, *overrides])
    origins = {}
    for section, table in cfg.to_dict().items():
        for name in table:
            key = f"{section}.{name}"
            origins[key] = (SET if key in named else f"from {path}" if key in in_file
                            else default_origin(source, key))
    return LoadedConfig(cfg, origins, added)


def _toml_value(value: Any) -> str:
    """``value`` as the right-hand side of a TOML ``key = value`` line (a ``--set`` value)."""
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()
