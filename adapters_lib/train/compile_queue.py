"""The engine's one compile queue: programs compiled on a background thread, ahead of need.

XLA spends ~90 s on a train step on a TPU, mostly on one thread; so programs compile one at a
time on one daemon thread (``CompileQueue``, ``step_programs._behind()``; the Compare's jobs on a
second one of their own, ``LANES``), fed by whoever
knows a program will be needed: a run's eval steps and narrower batches (``Steps``), the next
run's programs from Configure's edits (``train.plan.compile_ahead`` inside ``for_request``),
the sampler's after a run.

Every job is a ``CompileJob``: what it compiles (``what``: "train step", "eval step",
"sampler prefill", …), for whom (``about``: a config or run, in words), and its state —
``queued`` → ``compiling`` (since ``started_at``) → ``ready`` | ``failed``; or ``dropped``
(cancelled before it started). A compile already under way cannot be interrupted: it
finishes and is kept. A step that compiles in the foreground, or waits for a compile under
way, is a job too (``where = "foreground"``), so a listener sees what a run waits for.

A **request** (``request(purpose, about)``) groups the jobs queued for one purpose (the next
run: ``"next run"``): a newer request of the same purpose drops the queued jobs of the older
ones (``Future.cancel()``), and jobs it finds ready or under way are listed under it too.

**Holds** (``hold(purposes, why)``): while a run sets up (its model, adapters, data) and
traces its first step, no job of the held purposes starts (the Compare's, ``"compare"``):
their tracing holds the GIL the run needs (a repeat's set-up took 2.0 s on the v5e beside the
warm-up's sampler traces, 0.2 s without). Other jobs (the run's own eval steps and takeover)
start as before, ahead of the held ones; a job already under way finishes. When the run's first
step needs no compile (a repeat, a tweak the family's program serves), every job waits
(``ALL``) until step 1's metrics are in: on the v5e the 1B's rank tweak reached step 1 in 13.5 s
while its own program traced beside the base eval and step 1, a repeat 8.1 s beside the scorer's.
A hold starts with the run's set-up; before it, while the run waits in the engine's queue, a
**gate** (``gate_low``: the engine's "no run is queued, no client's device job waits or runs")
keeps the guesses (``LOW``) from starting.

``listen(callback)`` calls ``callback(job_dict)`` on every state change (from the thread that
made it: keep it short); ``jobs()`` lists the live jobs and the most recent finished ones.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

QUEUED, COMPILING, READY, FAILED, DROPPED = "queued", "compiling", "ready", "failed", "dropped"
STATES = (QUEUED, COMPILING, READY, FAILED, DROPPED)
LIVE = (QUEUED, COMPILING)
THREAD_NAME = "compile-behind"
LANES = {"compare": f"{THREAD_NAME}-compare"}
"""Purposes with a thread of their own: the Compare's sampler and scorer (seconds each) never
wait behind a train step's compile (~90 s on a TPU), nor it behind them."""
LOW = ("neighbour lengths",)
"""Purposes whose jobs start only when no other job waits: guesses (``engine.compile_ahead``'s
neighbouring lengths) never delay a program someone asked for."""
GATE_POLL_S = 0.25
"""How often a guess held by a gate (``gate_low``) asks it again."""
ALL = ("*",)
"""``hold(ALL)``: every purpose, the run's own jobs too."""
KEEP_DONE = 64
"""Finished jobs ``jobs()`` still lists (the most recent)."""

Listener = Callable[[dict[str, Any]], None]


@dataclass
class CompileJob:
    id: int
    what: str
    about: str = ""
    purpose: str = ""
    request: int = 0
    where: str = "behind"
    """"behind" (the compile thread) or "foreground" (a step compiles it, or waits for it)."""
    state: str = QUEUED
    queued_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    error: str = ""
    future: Future | None = field(default=None, repr=False)

    def seconds(self, now: float | None = None) -> float | None:
        """How long it compiled (so far, while compiling); None before it started."""
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else (time.time() if now is None else now)
        return round(max(0.0, end - self.started_at), 3)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "what": self.what, "about": self.about, "purpose": self.purpose,
                "request": self.request, "where": self.where, "state": self.state,
                "queued_at": self.queued_at, "started_at": self.started_at,
                "ended_at": self.ended_at, "seconds": self.seconds(), "error": self.error}


@dataclass
class Request:
    """One compile-ahead for a purpose (``request``); ``superseded`` once a newer one came."""

    id: int
    purpose: str
    about: str = ""
    superseded: bool = False


class CompileQueue:
    """The compile thread, its jobs and their listeners (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)
        self._pending: list[tuple[CompileJob, Callable[..., Any], tuple]] = []
        self._holds: dict[int, frozenset[str]] = {}
        self._low_gates: list[Callable[[], bool]] = []
        self._jobs: list[CompileJob] = []
        self._ids = itertools.count(1)
        self._requests: dict[str, Request] = {}
        self._listeners: list[Listener] = []
        self._local = threading.local()
        for lane in ("", *LANES):  # last: the threads read the fields above
            threading.Thread(target=self._run, args=(lane,), name=LANES.get(lane, THREAD_NAME),
                             daemon=True).start()

    # ----------------------------------------------------------------- requests

    def request(self, purpose: str, about: str = "") -> Request:
        """A new compile-ahead for ``purpose``: the queued jobs of its earlier ones are dropped."""
        with self._lock:
            new = Request(next(self._ids), purpose, about)
            old = self._requests.get(purpose)
            if old is not None:
                old.superseded = True
            self._requests[purpose] = new
            dropped = [j for j in self._jobs if j.purpose == purpose and j.request != new.id
                       and j.state == QUEUED and j.future is not None]
        for job in dropped:
            job.future.cancel()  # its done-callback marks it dropped
        return new

    def latest(self, purpose: str) -> Request | None:
        with self._lock:
            return self._requests.get(purpose)

    @contextlib.contextmanager
    def for_request(self, req: Request) -> Iterator[Request]:
        """Compiles submitted by this thread inside the block are ``req``'s jobs."""
        before = getattr(self._local, "request", None)
        self._local.request = req
        try:
            yield req
        finally:
            self._local.request = before

    def current_request(self) -> Request | None:
        return getattr(self._local, "request", None)

    # ----------------------------------------------------------------- jobs

    def submit(self, fn: Callable[..., Any], *args: Any, what: str = "compile", about: str | None = None,
               purpose: str | None = None) -> Future:
        """Queue ``fn(*args)`` on the compile thread; its future (``cancel()`` drops it while
        it waits). Inside ``for_request``, the job is that request's (a superseded request's
        job is dropped at once)."""
        req = self.current_request()
        job = self._new_job(what, about, purpose, req)
        future: Future = Future()
        job.future = future
        future.add_done_callback(lambda f: self._cancelled(job) if f.cancelled() else None)
        if req is not None and req.superseded:
            future.cancel()
            return future
        self._notify(job)
        with self._ready:
            self._pending.append((job, fn, args))
            self._ready.notify_all()
        return future

    def hold(self, purposes: tuple[str, ...] = ("compare",), why: str = "") -> Callable[[], None]:
        """Start no job of ``purposes`` (``ALL``: any job) until the returned function is called
        (idempotent). A step that needs a held program drops its job and compiles it itself
        (``StepProgram.__call__``): a hold never makes a step wait for itself."""
        with self._ready:
            token = next(self._ids)
            self._holds[token] = frozenset(purposes)
        if why:
            log.debug("compile queue: %s held (%s)", ", ".join(purposes), why)

        def release() -> None:
            with self._ready:
                if self._holds.pop(token, None) is not None:
                    self._ready.notify_all()

        return release

    def gate_low(self, may_start: Callable[[], bool]) -> Callable[[], None]:
        """Start no ``LOW`` job (a guess) while ``may_start()`` is false: the engine's "no run
        waits to start" (on the v5e a guess's set-up that began as the next run was queued took
        the GIL from that run's set-up: the 1B's lr tweak reached step 1 in 9.7 s, not 2-3 s).
        Polled (``GATE_POLL_S``) while a guess waits; returns the function that removes it."""
        with self._ready:
            self._low_gates.append(may_start)
            self._ready.notify_all()

        def remove() -> None:
            with self._ready:
                if may_start in self._low_gates:
                    self._low_gates.remove(may_start)
                    self._ready.notify_all()

        return remove

    def _low_may_start(self) -> bool:
        for may_start in list(self._low_gates):
            try:
                if not may_start():
                    return False
            except Exception:  # noqa: BLE001 - a gate that fails never holds guesses back
                continue
        return True

    def wait_free(self, purpose: str, timeout: float | None = None) -> bool:
        """Wait until no hold covers ``purpose``; False when ``timeout`` passed first."""
        with self._ready:
            return self._ready.wait_for(lambda: not any(purpose in h or ALL[0] in h for h in self._holds.values()),
                                        timeout)

    def _held(self, job: CompileJob) -> bool:
        return any(job.purpose in held or ALL[0] in held for held in self._holds.values())

    def _next(self, lane: str) -> tuple[CompileJob, Callable[..., Any], tuple]:
        """The oldest pending job of ``lane`` not held, a ``LOW`` one only when no other can
        start (waits for one)."""
        with self._ready:
            while True:
                gated = False
                for low in (False, True):  # the guesses (``LOW``) last
                    for i, item in enumerate(self._pending):
                        job = item[0]
                        if (job.purpose if job.purpose in LANES else "") != lane or (job.purpose in LOW) != low:
                            continue
                        if job.future.cancelled():
                            return self._pending.pop(i)
                        if low and not self._low_may_start():
                            gated = True
                            break
                        if not self._held(job):
                            return self._pending.pop(i)
                self._ready.wait(GATE_POLL_S if gated else None)

    def adopt(self, future: Future | None, what: str) -> None:
        """Inside ``for_request``: the program ``what`` is ready (``future`` None) or under way
        (its job, listed under the request from now on)."""
        req = self.current_request()
        if req is None:
            return
        with self._lock:
            job = next((j for j in self._jobs if future is not None and j.future is future), None)
            if job is not None and job.state in LIVE:  # its purpose stays: only its own may drop it
                job.request, job.about = req.id, req.about
                if job.purpose in LOW and req.purpose not in LOW:  # a guess asked for: no longer one
                    job.purpose = req.purpose
            else:
                job = self._new_job(what, None, None, req)
                job.state, job.started_at = READY, None
                job.ended_at = job.queued_at
        self._notify(job)

    @contextlib.contextmanager
    def foreground(self, what: str, about: str = "") -> Iterator[CompileJob]:
        """A compile (or a wait for one under way) that the calling step waits for."""
        job = self._new_job(what, about, "", None)
        job.where, job.state, job.started_at = "foreground", COMPILING, time.time()
        self._notify(job)
        try:
            yield job
        except BaseException as e:
            self._finish(job, FAILED, f"{type(e).__name__}: {e}")
            raise
        self._finish(job, READY)

    def jobs(self) -> list[dict[str, Any]]:
        """The live jobs and the most recent finished ones, oldest first."""
        with self._lock:
            return [j.to_json() for j in self._jobs]

    # ----------------------------------------------------------------- listeners

    def listen(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback(job_dict)`` on every state change; returns the un-listen function."""
        with self._lock:
            self._listeners.append(callback)

        def stop() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return stop

    def _notify(self, job: CompileJob) -> None:
        with self._lock:
            listeners = list(self._listeners)
            data = job.to_json()
        for callback in listeners:
            try:
                callback(data)
            except Exception:  # noqa: BLE001 - a listener never breaks a compile
                log.warning("a compile-queue listener failed", exc_info=True)

    # ----------------------------------------------------------------- the thread

    def _new_job(self, what: str, about: str | None, purpose: str | None, req: Request | None) -> CompileJob:
        with self._lock:
            job = CompileJob(next(self._ids), what,
                             about=about if about is not None else (req.about if req else ""),
                             purpose=purpose if purpose is not None else (req.purpose if req else ""),
                             request=req.id if req is not None else 0)
            self._jobs.append(job)
            done = [j for j in self._jobs if j.state not in LIVE]
            for old in done[:max(0, len(done) - KEEP_DONE)]:
                self._jobs.remove(old)
        return job

    def _cancelled(self, job: CompileJob) -> None:
        if job.state == QUEUED:
            self._finish(job, DROPPED)

    def _finish(self, job: CompileJob, state: str, error: str = "") -> None:
        with self._lock:
            job.state, job.error, job.ended_at = state, error, time.time()
        self._notify(job)

    def _run(self, lane: str) -> None:
        while True:
            job, fn, args = self._next(lane)
            if not job.future.set_running_or_notify_cancel():
                continue
            with self._lock:
                job.state, job.started_at = COMPILING, time.time()
            self._notify(job)
            try:
                from jax.profiler import TraceAnnotation  # a device trace names the job's thread

                with TraceAnnotation(f"compile job {job.what} ({job.purpose or job.about})"):
                    result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - the future carries it
                self._finish(job, FAILED, f"{type(e).__name__}: {str(e)[:300]}")
                job.future.set_exception(e)
            else:
                self._finish(job, READY)
                job.future.set_result(result)


def in_compile_thread() -> bool:
    return threading.current_thread().name.startswith(THREAD_NAME)
