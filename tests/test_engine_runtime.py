"""The engine's runtime and device thread, in-process: the lazy-import guard that lets
metadata requests run while gemma imports, and the supervision that keeps the device
thread serving whatever a run or a job does."""

from __future__ import annotations

import threading
import time
import types

import pytest

from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.run_queue import QueuedRun
from adapters_lib.engine.runtime import guard_lazy_imports, plain_imports
from adapters_lib.engine.scheduler import Scheduler


def _import_during_a_lazy_block(plain: bool) -> object:
    """What ``from typing import get_type_hints`` gives a thread while another thread is
    inside etils' ``lazy_imports()`` block (as gemma's package __init__ files are)."""
    from etils import epy

    inside, leave = threading.Event(), threading.Event()

    def gemma_like() -> None:
        with epy.lazy_imports():
            inside.set()
            leave.wait(30)

    holder = threading.Thread(target=gemma_like)
    holder.start()
    got: dict[str, object] = {}
    try:
        assert inside.wait(30)

        def request() -> None:
            if plain:
                with plain_imports():
                    from typing import get_type_hints
            else:
                from typing import get_type_hints
            got["value"] = get_type_hints

        worker = threading.Thread(target=request)
        worker.start()
        worker.join(30)
    finally:
        leave.set()
        holder.join(30)
    return got["value"]


def test_only_the_thread_inside_a_lazy_block_imports_lazily():
    """etils swaps ``builtins.__import__`` for the whole process while a thread is inside
    ``lazy_imports()``; the guard hands every other thread the real import (so gemma's lazy
    parts, ``gm.ckpts``, may be resolved on first use in any thread), and plain_imports()
    threads always."""
    import typing

    from etils import epy

    assert guard_lazy_imports()
    # the race the guard exists for: without it another thread gets etils' lazy stub
    assert _import_during_a_lazy_block(plain=False) is typing.get_type_hints
    assert _import_during_a_lazy_block(plain=True) is typing.get_type_hints
    # the block's own thread still gets etils' lazy module, as gemma means it to
    with epy.lazy_imports():
        import json as lazy_json
    assert type(lazy_json).__name__ == "LazyModule"


def _item(name: str) -> QueuedRun:
    run = types.SimpleNamespace(run_id=name, path=f"/runs/{name}")
    return QueuedRun(run=run, resume=False)


def _wait(predicate, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.01)


def test_a_run_that_fails_around_training_is_recorded_and_the_next_one_runs():
    trained, failed = [], []

    def train(item: QueuedRun) -> None:
        if item.run.run_id == "vanished":
            raise FileNotFoundError(2, "No such file or directory", item.run.path)
        trained.append(item.run.run_id)

    sched = Scheduler(train=train, on_failure=lambda item, e: failed.append((item.run.run_id, e)))
    sched.start()
    try:
        for name in ("vanished", "next"):
            sched.runs.put(_item(name))
        _wait(lambda: trained == ["next"])
        assert [(n, type(e)) for n, e in failed] == [("vanished", FileNotFoundError)]
        assert sched.health().device_thread == "alive"
        assert "vanished" in (sched.health().error or "")
        # device jobs are still served, and a job's own error goes to its caller only
        assert sched.submit(lambda: 41 + 1).result(30) == 42
        with pytest.raises(ZeroDivisionError):
            sched.submit(lambda: 1 / 0).result(30)
        assert sched.submit(lambda: "still here").result(30) == "still here"
    finally:
        sched.shutdown(lambda item: None, timeout=30)
    assert sched.health().device_thread == "stopped"


def test_a_failure_that_cannot_be_recorded_does_not_stop_the_device_thread():
    def on_failure(item: QueuedRun, err: BaseException) -> None:
        raise OSError(28, "No space left on device")  # even the status write fails

    sched = Scheduler(train=lambda item: 1 / 0, on_failure=on_failure)
    sched.start()
    try:
        sched.runs.put(_item("full-disk"))
        assert sched.submit(lambda: "served").result(30) == "served"
        assert sched.health().device_thread == "alive"
    finally:
        sched.shutdown(lambda item: None, timeout=30)


def test_a_job_waits_for_nothing_but_the_device_thread_and_internal_jobs_are_not_work():
    gate = threading.Event()
    sched = Scheduler(train=lambda item: gate.wait(30), on_failure=lambda item, e: None)
    sched.start()
    try:
        sched.runs.put(_item("training"))
        _wait(lambda: sched.runs.training() is not None)
        heartbeat = sched.submit(lambda: None, "heartbeat", internal=True)
        assert sched.snapshot() == ("training", [], 0)  # the heartbeat is housekeeping
        sched.drain_jobs()  # what the run's control does between two steps
        assert heartbeat.done()
        gate.set()
        _wait(lambda: sched.runs.training() is None)
    finally:
        sched.shutdown(lambda item: None, timeout=30)
    with pytest.raises(EngineError) as info:
        sched.submit(lambda: None)
    assert info.value.status == 503


def test_a_running_job_keeps_the_engine_busy_for_the_idle_clock():
    """A program store write waits for idleness: eval's scoring on the device thread is not idle."""
    gate, started = threading.Event(), threading.Event()
    sched = Scheduler(train=lambda item: None, on_failure=lambda item, e: None)
    sched.start()
    try:
        job = sched.submit(lambda: (started.set(), gate.wait(30)), "eval")
        assert started.wait(30)
        time.sleep(0.3)
        assert sched.idle_for() == 0.0  # the job left the queue but still runs
        gate.set()
        job.result(30)
        time.sleep(0.3)
        assert sched.idle_for() >= 0.25
    finally:
        sched.shutdown(lambda item: None, timeout=30)


def test_health_says_when_the_device_thread_is_gone():
    sched = Scheduler(train=lambda item: None, on_failure=lambda item, e: None)
    assert sched.health() == api.Health(device_thread="starting")
    sched.start()
    sched.closing.set()  # the thread ends as if it had been asked to ...
    sched.wake()
    sched.thread.join(30)
    sched.closing.clear()  # ... but nobody asked: that is a dead device thread
    assert sched.health().device_thread == "dead"
    assert sched.submit(lambda: "restarted").result(30) == "restarted"
    assert sched.health().device_thread == "alive" and sched.health().restarts == 1
    sched.shutdown(lambda item: None, timeout=30)
