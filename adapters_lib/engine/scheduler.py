"""The device thread and its queues: one training run at a time, device jobs in between.

- ``submit(fn, label)`` queues a device job (sampling, export) and returns its
  ``concurrent.futures.Future``: nobody blocks a thread waiting for it (the server awaits it
  on the event loop), so a long generation never holds a request thread.
- training runs come from ``runs`` (``run_queue.RunQueue``, the owner of run state; its
  ``on_queued`` wakes the thread). While a run trains, jobs are served between its steps
  (``drain_jobs``, called by the run's control); when idle, the device thread runs them at once.
  When a run's training ends, ``finish(item)`` is called once (the engine releases it there).
- The device thread is supervised: whatever escapes a job or a run (a bug) is logged, the
  run is failed through ``on_failure`` (``runs.lifecycle.record_failure``), and the loop goes
  on; if the thread itself ends (it should not), the next ``submit``/``enqueue`` restarts it.
  ``health()`` says which (status ``health``).

The jobs queue is guarded by a private lock; the run queue by the ``RunQueue``'s own (taken
after this one, never the other way round).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.run_queue import QueuedRun, RunQueue

log = logging.getLogger("adapters_lib.engine")


@dataclass
class Job:
    """A function to run on the device thread; its result (or exception) lands in ``future``."""

    fn: Callable[[], Any]
    label: str
    internal: bool = False
    """Engine housekeeping (the multi-host heartbeat): not counted as work in ``status``."""
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class Scheduler:
    def __init__(self, *, train: Callable[[QueuedRun], None],
                 on_failure: Callable[[QueuedRun, BaseException], None],
                 prepare: Callable[[], None] = lambda: None, runs: RunQueue | None = None,
                 finish: Callable[[QueuedRun], None] | None = None):
        self._lock = threading.Condition()
        self.jobs: collections.deque[Job] = collections.deque()
        self.runs = runs if runs is not None else RunQueue()
        self.runs.on_queued = self.wake
        self._finish = finish if finish is not None else self.runs.release
        self.closing = threading.Event()
        self.thread: threading.Thread | None = None
        self.thread_id: int | None = None
        self.last_activity = time.monotonic()
        self.running: Job | None = None  # the job on the device thread now (eval, a Compare, a warm-up)
        self.restarts = 0
        self.last_error: str | None = None
        self._train = train
        self._on_failure = on_failure
        self._prepare = prepare

    # ----------------------------------------------------------------- life cycle

    def start(self) -> None:
        self.thread = threading.Thread(target=self._supervise, name="device", daemon=True)
        self.thread.start()

    def _ensure_thread(self) -> None:
        """Restart the device thread if it ended without being asked to."""
        if self.thread is not None and not self.thread.is_alive() and not self.closing.is_set():
            self.restarts += 1
            log.error("the device thread had ended (%s): restarting it", self.last_error)
            self.start()

    def shutdown(self, settle_queued: Callable[[QueuedRun], None], timeout: float = 120.0,
                 ) -> list[QueuedRun]:
        """Ask the active run to stop at its next step, settle the queued ones, end the thread.
        Returns the runs that were queued."""
        self.closing.set()
        queued = self.runs.close()
        for item in queued:
            settle_queued(item)
        self.wake()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        return queued

    def health(self) -> api.Health:
        thread = self.thread
        if thread is None:
            return api.Health(device_thread="starting", restarts=self.restarts)
        if thread.is_alive():
            return api.Health(device_thread="alive", error=self.last_error,
                              restarts=self.restarts)
        if self.closing.is_set():
            return api.Health(device_thread="stopped", restarts=self.restarts)
        return api.Health(device_thread="dead", error=self.last_error, restarts=self.restarts)

    # ----------------------------------------------------------------- queues

    def submit(self, fn: Callable[[], Any], label: str = "job", *,
               internal: bool = False) -> concurrent.futures.Future:
        """Queue ``fn`` for the device thread (between steps when a run trains)."""
        if self.closing.is_set():
            raise EngineError("the engine is shutting down", status=503)
        job = Job(fn, label, internal)
        with self._lock:
            self.jobs.append(job)
            self._lock.notify_all()
        self._ensure_thread()
        return job.future

    def wake(self) -> None:
        """Tell the device thread that work arrived (a run queued; see ``runs.on_queued``)."""
        with self._lock:
            self._lock.notify_all()
        self._ensure_thread()

    def snapshot(self) -> tuple[str | None, list[str], int]:
        """(active run id, queued run ids, pending jobs that are work)."""
        active, queued = self.runs.snapshot()
        with self._lock:
            return active, queued, sum(1 for j in self.jobs if not j.internal)

    def _work_queued(self) -> bool:
        """(Under the lock.) A job that is work (not internal) waits."""
        return any(not j.internal for j in self.jobs)

    def waiting(self) -> bool:
        """Whether a run trains or waits, a job that is work waits, or the engine closes (an
        internal warm-up gives way: ``warm_compare``)."""
        with self._lock:
            jobs = self._work_queued()
        return (jobs or self.closing.is_set() or self.runs.training() is not None
                or self.runs.has_queued())

    def nothing_waits(self) -> bool:
        """Whether no run waits to start and no client's device job (a Compare, an eval, an
        export) waits or runs: when the compile thread's guesses may start (the engine's gate,
        ``compile_ahead.AheadCompiler.gate_guesses``)."""
        with self._lock:
            serving = self._work_queued() or (self.running is not None and not self.running.internal)
        return not serving and not self.runs.has_queued()

    def work_within(self, seconds: float) -> bool:
        """Whether work (``waiting``) is there now or comes within ``seconds`` (woken by
        ``submit`` and ``wake``, not polled)."""
        with self._lock:
            return self._lock.wait_for(self.waiting, timeout=seconds)

    def idle_for(self, open_streams: int = 0) -> float:
        """Seconds since the device thread last did anything (0 while busy or streaming: a run
        queued or training, a job waiting or running — eval's scoring took 6.9 s more on the v5e
        beside a program store write that took the running job for idleness)."""
        with self._lock:
            busy = (self.running is not None or self.runs.training() is not None or self.runs.has_queued()
                    or self._work_queued())
        if busy or open_streams:
            self.last_activity = time.monotonic()
            return 0.0
        return time.monotonic() - self.last_activity

    def drain_jobs(self) -> None:
        """Run the device jobs waiting now (called between training steps)."""
        while True:
            with self._lock:
                if not self.jobs:
                    return
                job = self.jobs.popleft()
            self._run_job(job)

    # ----------------------------------------------------------------- the device thread

    def _supervise(self) -> None:
        self.thread_id = threading.get_ident()
        while True:
            try:
                self._loop()
                return
            except BaseException as e:  # noqa: BLE001 - a bug in the loop itself
                self.last_error = f"{type(e).__name__}: {e}"
                self.restarts += 1
                log.error("device loop failed (restart %d): %s\n%s", self.restarts,
                          self.last_error, traceback.format_exc(limit=20))
                if self.closing.is_set() or isinstance(e, (KeyboardInterrupt, SystemExit)):
                    return
                time.sleep(min(5.0, 0.1 * self.restarts))

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self.jobs and not self.runs.has_queued() and not self.closing.is_set():
                    self._lock.wait()
                if self.closing.is_set() and not self.jobs:
                    return
                job = self.jobs.popleft() if self.jobs else None
                item = self.runs.take_next() if job is None else None
            if job is not None:
                self._run_job(job)
            elif item is not None:
                self._run_item(item)

    def _run_job(self, job: Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        self.running = job
        try:
            self._prepare()
            job.future.set_result(job.fn())
        except BaseException as e:  # noqa: BLE001 - handed to the waiting request
            job.future.set_exception(e)
        finally:
            self.running = None
            self.last_activity = time.monotonic()

    def _run_item(self, item: QueuedRun) -> None:
        try:
            self._prepare()
            self._train(item)
        except Exception as e:  # noqa: BLE001 - the device thread outlives any run
            self.last_error = f"run {item.run.run_id}: {type(e).__name__}: {e}"
            log.exception("run %s: unexpected error around the run", item.run.run_id)
            try:
                self._on_failure(item, e)
            except Exception:  # noqa: BLE001 - recording it failed too: logged, go on
                log.exception("run %s: its failure could not be recorded", item.run.run_id)
        finally:
            try:
                self._finish(item)
            except Exception:  # noqa: BLE001 - the device thread outlives any run
                log.exception("run %s: releasing it failed", item.run.run_id)
                self.runs.release(item)
            self.last_activity = time.monotonic()
