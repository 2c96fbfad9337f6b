"""Finding and starting this user's engine process: its files, its token, a detached start.

The paths are the engine's own (``adapters_lib.engine.locations``), so the
engine and its clients always agree where the socket is. Never imports JAX.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from adapters_lib import paths
from adapters_lib.engine import locations
from adapters_lib.errors import WorkbenchError

START_TIMEOUT_S = 60.0


class EngineNotRunning(WorkbenchError):
    pass


def engine_files() -> dict[str, Path]:
    """The engine's socket, token, pid, info and log (the same paths the engine uses)."""
    return locations.engine_files()


def read_token(path: Path | None = None) -> str:
    path = path or engine_files()["token"]
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise EngineNotRunning("the engine is not running (no token file)", where=str(path),
                               hint="start it with `gemma-workbench engine start`") from None


def spawn_engine(*, tcp: str | None = None, env: dict[str, str] | None = None,
                 on_demand: bool = True, tcp_any_address: bool = False) -> subprocess.Popen:
    """Start ``python -m adapters_lib.engine`` detached: own session, no terminal, log to file.

    An engine started on demand (``on_demand``: by the TUI or a CLI command, not by
    ``engine start``) exits after ``GEMMA_WORKBENCH_ENGINE_IDLE_EXIT`` seconds (default 1800)
    with no run, no job and no client, so that it does not hold the accelerator forever.
    """
    log_path = engine_files()["log"]
    paths.ensure_private_dir(log_path.parent)
    cmd = [sys.executable, "-m", "adapters_lib.engine"]
    if on_demand:
        idle = os.environ.get("GEMMA_WORKBENCH_ENGINE_IDLE_EXIT", "1800")
        cmd += ["--idle-exit", idle]
    if tcp:
        locations.parse_tcp(tcp, any_address=tcp_any_address)  # a mistake: one line, here
        cmd += ["--tcp", tcp] + (["--tcp-any-address"] if tcp_any_address else [])
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True,
                                env=env if env is not None else os.environ.copy())


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""
