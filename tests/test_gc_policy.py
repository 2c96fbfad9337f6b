"""``engine.gc_policy``: the engine's full collections happen while it is idle, once after
each stretch of real work (not after a status poll), and what survives is frozen (later
collections in a run do not walk it)."""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from pathlib import Path

from adapters_lib.engine.gc_policy import THRESHOLDS, IdleCollector


def test_an_idle_engine_collects_once_and_freezes_what_survives_and_a_busy_one_does_not():
    """In a Python of its own, as in an engine process: a test worker's heap (every earlier
    test's objects) would make each full collection seconds long, and freezing it is no
    business of a test."""
    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(here)!r}); "
                          "import test_gc_policy; test_gc_policy.scenario()"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


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
