"""The owner lease (``owner.json``): which process works on a run, told apart from pid reuse.

A lease names the owner by pid, **process start time** and host (``Owner``). The process is
alive when a process with that pid exists on this host, is not a zombie, and started at that
time: a pid alone is not enough (after a crash the pid may belong to anything). On another
host nothing can be checked: such an owner counts as alive (never interrupted from here).

Kinds: ``queued`` (whoever made or queued the run: ``create_run``, the engine's resume) and
``training`` (the process training it: the trainer harness claims it before the first
write). A ``training`` lease held by a live process is exclusive: a second trainer is refused
(``RunOwned``) instead of training beside it. A ``queued`` lease is handed over to the trainer.
Entering a state where nobody works on the run releases the lease (``release``).

Runs made before leases existed have none: their owner is the ``pid`` in status.json, if any.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import files

KINDS = ("queued", "training")
_START_TOLERANCE_S = 0.05


class RunOwned(WorkbenchError):
    """Another live process trains this run."""


@dataclass(frozen=True)
class Owner:
    pid: int
    started: float | None
    """The process's start time (seconds since the epoch), or None where unknown (old runs)."""
    host: str
    kind: str = "training"
    since: float = 0.0
    what: str = ""
    """What the process is, in words (``engine``, ``gemma-workbench train``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Owner | None:
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
            return None
        started = data.get("started")
        return cls(pid=data["pid"], started=float(started) if isinstance(started, (int, float)) else None,
                   host=str(data.get("host") or ""), kind=str(data.get("kind") or "training"),
                   since=float(data.get("since") or 0.0), what=str(data.get("what") or ""))

    def describe(self) -> str:
        who = self.what or "a process"
        return f"{who} (pid {self.pid} on {self.host or 'this host'})"


def host() -> str:
    return socket.gethostname()


def process_started(pid: int) -> float | None:
    """The start time of live process ``pid`` (None: no such process, or a zombie)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # another user's process: it exists
        return float("nan")


_ME: dict[int, float | None] = {}


def me(kind: str = "training", what: str = "") -> Owner:
    """This process as an owner."""
    pid = os.getpid()
    if pid not in _ME:
        _ME[pid] = process_started(pid)
    return Owner(pid=pid, started=_ME[pid], host=host(), kind=kind, since=round(time.time(), 3),
                 what=what or _what_am_i())


def _what_am_i() -> str:
    """The process in words, from its command line."""
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    norm = argv0.replace(os.sep, "/")
    if "adapters_lib/engine" in norm:
        return "the engine"
    if "adapters_lib/multihost" in norm:
        return "a multi-host training process"
    if os.path.basename(argv0) in ("gemma-workbench", "__main__.py") and len(sys.argv) > 1:
        return f"`gemma-workbench {sys.argv[1]}`"
    return f"python {os.path.basename(argv0)}".strip()


def is_me(owner: Owner) -> bool:
    mine = me()
    return owner.pid == mine.pid and owner.host == mine.host and _same_start(owner.started, mine.started)


def _same_start(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return True  # an old lease without a start time: the pid is all there is
    if a != a or b != b:  # NaN: not readable (another user's process)
        return True
    return abs(a - b) <= _START_TOLERANCE_S


def alive(owner: Owner) -> bool:
    """Is the owner still running? On another host: cannot tell, so yes."""
    if owner.host and owner.host != host():
        return True
    started = process_started(owner.pid)
    if started is None:
        return False
    return _same_start(owner.started, started)


def read(run: Any) -> Owner | None:
    return Owner.from_json(files.read_json(run.owner_path))


def owner_of(run: Any, status: dict[str, Any] | None = None) -> Owner | None:
    """The lease, or for a run without one the ``pid`` in its status (no start time)."""
    owner = read(run)
    if owner is not None:
        return owner
    status = status if status is not None else run.status()
    pid = status.get("pid")
    if isinstance(pid, int):
        return Owner(pid=pid, started=None, host=host(), kind="training", what="the process in status.json")
    return None


def claim(run: Any, kind: str = "training", what: str = "") -> Owner:
    """Make this process the run's owner; ``RunOwned`` if another live process trains it."""
    if kind not in KINDS:
        raise ValueError(f"unknown lease kind {kind!r}")
    if not getattr(run, "records", True):
        return me(kind, what)
    with files.dir_lock(run.path):
        current = read(run)
        if (kind == "training" and current is not None and current.kind == "training"
                and not is_me(current) and alive(current)):
            raise RunOwned(f"run {run.run_id} is being trained by {current.describe()}",
                           where=str(run.path),
                           hint="stop that process first (or wait for it); two trainers on one "
                                "run would overwrite each other's checkpoints")
        owner = me(kind, what)
        files.write_json_atomic(run.owner_path, owner.to_json())
    return owner


def release(run: Any) -> None:
    """Drop this process's lease (no-op if another process holds it or the folder is gone)."""
    if not getattr(run, "records", True):
        return
    try:
        with files.dir_lock(run.path):
            current = read(run)
            if current is not None and is_me(current):
                with contextlib.suppress(FileNotFoundError):
                    run.owner_path.unlink()
                files.fsync_dir(run.path)
    except (FileNotFoundError, NotADirectoryError):
        pass


def drop_stale(run: Any) -> None:
    """Remove a lease whose owner is gone (after the run was marked interrupted)."""
    if not getattr(run, "records", True):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), files.dir_lock(run.path):
        current = read(run)
        if current is not None and not alive(current):
            run.owner_path.unlink(missing_ok=True)
