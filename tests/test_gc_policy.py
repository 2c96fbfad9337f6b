"""``engine.gc_policy``: the engine's full collections happen while it is idle, once after
each stretch of real work (not after a status poll), and what survives is frozen (later
collections in a run do not walk it); with ``GEMMA_WORKBENCH_GC_POLL_S`` every collection is
made on the collector's own thread."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

from adapters_lib.engine.gc_policy import THREAD_NAME, THRESHOLDS, IdleCollector


def _in_a_python_of_its_own(name: str) -> None:
    """In a Python of its own, as in an engine process: a test worker's heap (every earlier
    test's objects) would make each full collection seconds long, and freezing it or turning
    the collector off is no business of a test."""
    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(here)!r}); "
                          f"import test_gc_policy; test_gc_policy.{name}()"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_an_idle_engine_collects_once_and_freezes_what_survives_and_a_busy_one_does_not():
    _in_a_python_of_its_own("scenario")


def test_with_a_poll_every_collection_is_made_on_the_collectors_thread():
    """``GEMMA_WORKBENCH_GC_POLL_S``: the automatic collector off, the young collections on the
    ``engine-gc`` thread (never in the thread that allocates: the engine's device thread)."""
    _in_a_python_of_its_own("scenario_thread")


def scenario_thread() -> None:
    collector = IdleCollector(lambda: 0.0, young_poll_s=0.01).start()  # busy throughout
    threads: set[str] = set()

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            threads.add(threading.current_thread().name)

    gc.callbacks.append(seen)
    try:
        assert not gc.isenabled() and gc.get_threshold() == THRESHOLDS
        deadline = time.monotonic() + 60
        while collector.young < 2:  # garbage cycles, made here past the threshold
            assert time.monotonic() < deadline, "no collection on the collector's thread"
            for _ in range(THRESHOLDS[0] + 10_000):
                c = []
                c.append(c)
            del c
            time.sleep(0.05)
        assert threads == {THREAD_NAME} and collector.collections == 0  # no full one: not idle
    finally:
        gc.callbacks.remove(seen)
        collector.stop()
    assert gc.isenabled() and gc.get_freeze_count() == 0  # put back
    print("ok")


def scenario() -> None:
    clock = {"idle": 0.0}
    before, frozen = gc.get_threshold(), gc.get_freeze_count()  # Python's own frozen at start
    collector = IdleCollector(lambda: clock["idle"], idle_s=1.0, poll_s=0.01, min_young=2).start()
    try:
        assert gc.get_threshold() == THRESHOLDS
        time.sleep(0.2)  # busy: nothing collected
        assert collector.collections == 0 and gc.get_freeze_count() == frozen
        cycles = [[] for _ in range(50_000)]
        for c in cycles:
            c.append(c)  # garbage only a collection frees
        del cycles, c
        kept = [object() for _ in range(1000)]  # survivors
        clock["idle"] = 5.0  # idle: one collection, then none while it stays idle
        deadline = time.monotonic() + 30
        while collector.collections == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)
        assert collector.collections == 1 and gc.get_freeze_count() >= frozen + len(kept)
        assert gc.collect() < 1000  # the 50,000 cycles were freed by the idle collection
        clock["idle"] = 0.0  # a request, then idle again: little allocated, no collection
        time.sleep(0.1)
        clock["idle"] = 5.0
        time.sleep(0.2)
        assert collector.collections == 1
        more = [[] for _ in range(150_000)]  # work: 3 of the youngest's collections, then idle
        del more
        while collector.collections == 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        collector.stop()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before  # put back at stop
    print("ok")
