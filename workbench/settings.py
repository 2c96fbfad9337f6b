"""User settings of the TUI, remembered in ``<config dir>/settings.toml``.

Only a few keys: ``theme`` (the Textual theme name) and ``prompt_history`` (the last prompts
typed on the Compare screen) in ``[tui]``; at the top, ``remote`` (an ssh destination: the
engine to use when no ``--remote`` is given, see docs/accelerators.md) and
``remote_command`` (how to run gemma-workbench there). Reading never fails: a missing or
broken file gives defaults. Saving keeps the keys it does not know.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from adapters_lib import paths

HISTORY_LIMIT = 20


@dataclass(frozen=True)
class Settings:
    theme: str = ""
    prompt_history: tuple[str, ...] = field(default_factory=tuple)
    remote: str = ""
    remote_command: str = ""

    def with_prompt(self, prompt: str) -> Settings:
        """The settings with ``prompt`` moved to the front of the history."""
        rest = [p for p in self.prompt_history if p != prompt]
        return replace(self, prompt_history=tuple([prompt, *rest][:HISTORY_LIMIT]))


def settings_path() -> Path:
    return paths.config_dir() / "settings.toml"


def _read() -> dict:
    try:
        return tomllib.loads(settings_path().read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def load_settings() -> Settings:
    top = _read()
    raw = top.get("tui", {}) if isinstance(top.get("tui"), dict) else {}
    history = raw.get("prompt_history", [])
    return Settings(
        theme=_text(raw.get("theme", "")),
        prompt_history=tuple(p for p in history if isinstance(p, str))[:HISTORY_LIMIT]
        if isinstance(history, list) else (),
        remote=_text(top.get("remote", "")),
        remote_command=_text(top.get("remote_command", "")),
    )


def save_settings(settings: Settings) -> None:
    """Write atomically (a temp file renamed over the old one), keeping the keys of the file
    this module does not write (a ``remote`` the user typed is never lost)."""
    import tomli_w

    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read()
    data["tui"] = {"theme": settings.theme, "prompt_history": list(settings.prompt_history)}
    for key in ("remote", "remote_command"):
        if getattr(settings, key):
            data[key] = getattr(settings, key)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
