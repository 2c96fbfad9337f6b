"""The engine's runs in flight: the FIFO of queued runs and the one that trains now.

``RunQueue`` is the one owner of run state inside the engine. Every change that touches both
the queue and a run's ``status.json`` happens here, under its private lock, so that a reader
(``state``) never sees one without the other:

- ``create(cfg)`` — a new run directory (``runs.Registry``), queued;
- ``resume(run, from_checkpoint)`` — a stopped, failed or interrupted run, queued again;
- ``stop(run)`` — a queued run settles as stopped; the training one is asked to stop;
- ``release(item)`` — the device thread is done with a run (once, when its training ends);
- ``state(run)`` — its status, reconciled with what this engine works on.

The device thread takes runs with ``take_next``; ``on_queued`` (the scheduler's ``wake``) is
called after each put, outside the lock.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib import runs
from adapters_lib.engine.errors import EngineError


@dataclass
class QueuedRun:
    run: Any
    """The ``runs.RunDir``."""
    resume: bool
    stop: threading.Event = field(default_factory=threading.Event)


class RunQueue:
    def __init__(self, registry: runs.Registry | None = None):
        self._lock = threading.Condition()
        self._queue: collections.deque[QueuedRun] = collections.deque()
        self._active: QueuedRun | None = None
        self._registry = registry
        self.on_queued: Callable[[], None] = lambda: None

    # ----------------------------------------------------------------- what clients ask

    def create(self, cfg: Any) -> runs.RunDir:
        """A new run directory for ``cfg``, queued (created and queued together)."""
        assert self._registry is not None
        with self._lock:
            run = self._registry.create(cfg)
            self._queue.append(QueuedRun(run, resume=False))
        self.on_queued()
        return run

    def resume(self, run: runs.RunDir, from_checkpoint: bool) -> None:
        """Queue ``run`` again (its lease claimed, its state ``queued``)."""
        with self._lock:
            try:
                runs.lease.claim(run, "queued")
                run.set_state("queued", "resume requested" if from_checkpoint
                              else "restart requested (no checkpoint)")
            except (runs.IllegalTransition, runs.RunOwned) as e:
                raise EngineError(e.message, status=409, hint=e.hint) from None
            self._queue.append(QueuedRun(run, resume=from_checkpoint))
        self.on_queued()

    def put(self, item: QueuedRun) -> None:
        """Queue an item as it is (``create`` and ``resume`` make theirs)."""
        with self._lock:
            self._queue.append(item)
        self.on_queued()

    def stop(self, run: runs.RunDir) -> str:
        """"queued" (it settled as stopped), "active" (asked to stop at its next step) or ""
        (this engine does not work on it)."""
        with self._lock:
            queued = [q for q in self._queue if q.run.path == run.path]
            for q in queued:
                self._queue.remove(q)
            if queued:
                runs.lifecycle.settle(run, "stopped", "stopped before it started")
                return "queued"
            if self._active is not None and self._active.run.path == run.path:
                self._active.stop.set()
                return "active"
        return ""

    def state(self, run: runs.RunDir) -> dict[str, Any]:
        """The run's status, reconciled: an active run nobody works on becomes interrupted;
        the run this engine trains reads ``stopping`` once asked to stop."""
        with self._lock:
            status = run.status()
            active, queued = self._works_on(run.path)
            stop_set = active and self._active is not None and self._active.stop.is_set()
        status = runs.lifecycle.reconcile(run, status, here=active or queued)
        if active:
            if stop_set and status.get("state") == runs.RunState.RUNNING:
                status["state"] = runs.RunState.STOPPING.value
        elif queued:
            status["state"] = runs.RunState.QUEUED.value
        status.setdefault("run_id", run.run_id)
        return status

    def busy_with(self, run: runs.RunDir, *, settle_s: float = 0.0) -> bool:
        """Whether this engine trains or queues ``run``; ``settle_s``: first wait that long for
        a run that just ended to be released."""
        with self._lock:
            if settle_s:
                self._lock.wait_for(lambda: not self._works_on(run.path)[0], timeout=settle_s)
            return any(self._works_on(run.path))

    def training(self) -> QueuedRun | None:
        """The run the device thread trains now."""
        with self._lock:
            return self._active

    def snapshot(self) -> tuple[str | None, list[str]]:
        """(the training run's id, the queued runs' ids)."""
        with self._lock:
            active = self._active.run.run_id if self._active else None
            return active, [q.run.run_id for q in self._queue]

    # ----------------------------------------------------------------- the device thread

    def has_queued(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def take_next(self) -> QueuedRun | None:
        """The next queued run, now the active one (the device thread only)."""
        with self._lock:
            if not self._queue:
                return None
            self._active = self._queue.popleft()
            return self._active

    def release(self, item: QueuedRun) -> bool:
        """The device thread is done with ``item``; returns whether its run is queued again
        (resumed meanwhile: the queue owns it now)."""
        with self._lock:
            if self._active is item:
                self._active = None
                self._lock.notify_all()  # a delete waits for the run to be let go
            return self._works_on(item.run.path)[1]

    def close(self) -> list[QueuedRun]:
        """Ask the training run to stop; take every queued one off (returned, to settle)."""
        with self._lock:
            queued = list(self._queue)
            self._queue.clear()
            if self._active is not None:
                self._active.stop.set()
            return queued

    def _works_on(self, path: Path) -> tuple[bool, bool]:
        active = self._active is not None and self._active.run.path == path
        return active, any(q.run.path == path for q in self._queue)
