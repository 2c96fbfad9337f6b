"""User settings of the TUI, remembered in ``<config dir>/settings.toml``.

Only a few keys: ``theme`` (the Textual theme name) and ``prompt_history`` (the last prompts
typed on the Compare screen). Reading never fails: a missing or broken file gives defaults.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from adapters_lib import paths
from adapters_lib.config import dumps_toml

HISTORY_LIMIT = 20


@dataclass(frozen=True)
class Settings:
    theme: str = ""
    prompt_history: tuple[str, ...] = field(default_factory=tuple)

    def with_prompt(self, prompt: str) -> Settings:
        """The settings with ``prompt`` moved to the front of the history."""
        rest = [p for p in self.prompt_history if p != prompt]
        return replace(self, prompt_history=tuple([prompt, *rest][:HISTORY_LIMIT]))


def settings_path() -> Path:
    return paths.config_dir() / "settings.toml"


def load_settings() -> Settings:
    try:
        raw = tomllib.loads(settings_path().read_text(encoding="utf-8")).get("tui", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return Settings()
    theme = raw.get("theme", "")
    history = raw.get("prompt_history", [])
    return Settings(
        theme=theme if isinstance(theme, str) else "",
        prompt_history=tuple(p for p in history if isinstance(p, str))[:HISTORY_LIMIT]
        if isinstance(history, list) else (),
    )


def save_settings(settings: Settings) -> None:
    """Write atomically (a temp file renamed over the old one)."""
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps_toml({"tui": {"theme": settings.theme,
                               "prompt_history": list(settings.prompt_history)}})
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
