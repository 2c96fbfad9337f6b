"""Where things live on disk: one small module over platformdirs.

Every directory can be moved with an environment variable (tests use them):
``GEMMA_WORKBENCH_HOME`` moves data, state, config and runtime under one root.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "gemma-workbench"


def _home() -> Path | None:
    home = os.environ.get("GEMMA_WORKBENCH_HOME")
    return Path(home).expanduser() if home else None


def data_dir() -> Path:
    """Runs, demo assets, exports: ``~/.local/share/gemma-workbench``."""
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP))


def state_dir() -> Path:
    """Engine log and engine registry: ``~/.local/state/gemma-workbench``."""
    home = _home()
    return home / "state" if home else Path(platformdirs.user_state_dir(APP))


def config_dir() -> Path:
    """User settings (theme, extra model folders): ``~/.config/gemma-workbench``."""
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP))


def runtime_dir() -> Path:
    """The engine socket and token. ``$XDG_RUNTIME_DIR/gemma-workbench`` when there is one."""
    home = _home()
    if home:
        return home / "run"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / APP
    return state_dir() / "run"


def runs_dir() -> Path:
    """The default parent of run directories (contract): ``<data dir>/runs``."""
    override = os.environ.get("GEMMA_WORKBENCH_RUNS")
    return Path(override).expanduser() if override else data_dir() / "runs"


def demo_dir() -> Path:
    """Demo tokenizer and other made-at-first-use assets."""
    return data_dir() / "demo"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if needed and return it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
