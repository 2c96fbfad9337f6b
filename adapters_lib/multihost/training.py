"""Training one run directory as one process of the job, and what a lost process means."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.multihost.bus import Bus
from adapters_lib.multihost.control import SyncedControl
from adapters_lib.multihost.distributed import is_primary, process_count
from adapters_lib.multihost.rundirs import run_dir_for
from adapters_lib.multihost.watchdog import Watchdog
from adapters_lib.runs import RunDir


def train_one(run_path: Path, *, resume: bool, bus: Bus | None = None, inner: Any = None,
              control: Callable[..., Any] | None = None, watchdog_s: float | None = None):
    """Train ``run_path`` as this process of the job (the same call on every process);
    ``control(bus, inner)`` makes its training control (default ``SyncedControl``).

    When the job loses a process mid-run (the collectives fail), process 0 marks the run
    ``interrupted`` (not ``failed``): it resumes from its last checkpoint. A process killed
    outright leaves the run ``running`` with a dead pid; the next engine start marks it.
    """
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    run = run_dir_for(run_path)
    cfg = run.config()
    bus = bus or Bus()
    control = (control or SyncedControl)(bus, inner)
    if is_primary():
        run.write_status(run.state, pid=os.getpid(), processes=process_count())
    watchdog = Watchdog(lambda reason: mark_interrupted(run, reason), timeout=watchdog_s).start()
    try:
        return run_training(cfg, run, control=control, resume=resume, hooks=default_hooks)
    except WorkbenchError:
        raise
    except Exception as err:
        if process_count() > 1 and lost_peer(err):
            first = str(err).splitlines()[0][:200] if str(err) else ""
            mark_interrupted(run, f"{type(err).__name__}: {first}", force=True)
        raise
    finally:
        watchdog.stop()


def lost_peer(err: BaseException) -> bool:
    """An error from the runtime's collectives or coordination (a process of the job died),
    as opposed to a mistake or a bug in this process."""
    text = f"{type(err).__name__}: {err}".lower()
    return type(err).__name__ in ("XlaRuntimeError", "JaxRuntimeError") or any(
        w in text for w in ("gloo", "connection", "peer", "heartbeat", "coordination",
                            "barrier", "deadline", "unavailable", "socket"))


def mark_interrupted(run: RunDir, reason: str = "", *, force: bool = False) -> None:
    """Process 0: the run stopped because a process of the job is gone (resumable).

    ``force``: also over the ``failed`` that ``run_training`` wrote for the runtime error.
    """
    from adapters_lib.runs import lifecycle

    allowed = ("running", "stopping", "queued") + (("failed",) if force else ())
    if not is_primary():
        return
    message = "a process of the multi-host job stopped; resume from the last checkpoint"
    lifecycle.mark_interrupted(run, message + (f" ({reason})" if reason else ""), expect=allowed)
