"""Where things live on disk: one small module over platformdirs.

Every directory can be moved with an environment variable (tests use them):
``GEMMA_WORKBENCH_HOME`` moves data, state, config and runtime under one root.

``check_environment()`` (called once by the CLI, before anything else) checks every
``GEMMA_WORKBENCH_*`` variable: a number that is not one, or a folder variable naming a file,
is a one-line ``WorkbenchError``; relative folders are made absolute, so that an engine the
client starts (anywhere) sees the same folders.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import platformdirs

from adapters_lib.errors import WorkbenchError

APP = "gemma-workbench"

NUMERIC_ENV = {
    "GEMMA_WORKBENCH_ENGINE_IDLE_EXIT": (1800.0, 0.0, "seconds an engine started on demand "
                                                      "waits idle before it exits (0 = never)"),
    "GEMMA_WORKBENCH_SSE_PING_S": (10.0, 0.01, "seconds between keep-alive pings on a stream"),
    "GEMMA_WORKBENCH_MULTIHOST_TIMEOUT": (30.0, 0.01, "seconds a multi-host follower waits for "
                                                      "the leader"),
    "GEMMA_WORKBENCH_RECONNECT_S": (300.0, 0.0, "seconds a dropped --remote link is retried"),
    "GEMMA_WORKBENCH_PROGRAMS_GB": (2.0, 0.0, "GiB the program store keeps (0 = off)"),
    "GEMMA_WORKBENCH_WEIGHTS_CACHE_GB": (8.0, 0.0, "GiB the converted-weights cache keeps (0 = off)"),
    "GEMMA_WORKBENCH_STACKS_EVERY_S": (0.0, 0.0, "seconds between the engine's samples of its "
                                                 "threads (how long the GIL kept the sampler; the "
                                                 "stacks after a long wait) in state/stacks.log (0 = off)"),
    "GEMMA_WORKBENCH_GC_POLL_S": (0.02, 0.0, "seconds between the engine's collector thread's looks "
                                             "at the youngest generation: collections there, never "
                                             "in the device thread (0 = Python's own collector)"),
}
"""name → (default, smallest allowed value, meaning)."""
FOLDER_ENV = ("GEMMA_WORKBENCH_HOME", "GEMMA_WORKBENCH_RUNS", "GEMMA_WORKBENCH_COMPILE_CACHE",
              "GEMMA_WORKBENCH_PROGRAMS")


def env_number(name: str) -> float:
    """A numeric ``GEMMA_WORKBENCH_*`` variable (its default when unset or empty)."""
    default, lowest, meaning = NUMERIC_ENV[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < lowest:
        raise WorkbenchError(f"{text!r} is not a number ≥ {lowest:g}", where=name,
                             hint=f"it is the {meaning}; unset it for the default {default:g}")
    return value


def check_environment() -> None:
    """Check (and make absolute) every ``GEMMA_WORKBENCH_*`` variable; see the module doc."""
    for name in NUMERIC_ENV:
        env_number(name)
    for name in FOLDER_ENV:
        text = os.environ.get(name, "")
        if not text:
            continue
        if "\0" in text:
            raise WorkbenchError(f"{name} holds a NUL character", where=name)
        try:
            folder = Path(text).expanduser()
        except RuntimeError:
            raise WorkbenchError(f"{text!r}: cannot expand ~ (no such user)", where=name) from None
        if folder.exists() and not folder.is_dir():
            raise WorkbenchError(f"{text!r} is a file, not a folder", where=name,
                                 hint="point it at a folder (made when missing), or unset it")
        if not folder.is_absolute():
            os.environ[name] = os.path.abspath(folder)


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


def exists(path: Path, *, where: str, hint: str) -> bool:
    """``path.exists()``, with a path the system cannot look up at all (a name longer than the
    file system allows, a NUL byte, a component that is not searchable) a ``WorkbenchError``
    naming ``where`` instead of an ``OSError`` from deep inside a reader."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        shown = str(path) if len(str(path)) <= 120 else str(path)[:117] + "..."
        raise WorkbenchError(f"{shown}: {reason.lower()}", where=where, hint=hint) from None
    return True

