"""The engine's garbage collector: full collections while the engine is idle, not in a run.

A full (generation-2) collection walks every object on the heap, holding the GIL. The engine's
heap is large (models, the jaxprs its programs were traced from), and tracing a program makes
hundreds of thousands of objects more, so a trace beside a run's steps meets such collections
and the device thread waits for them: on this CPU, tracing the Gemma-3-1B train step beside a
loop of small jitted steps, the longest step (395 ms) was a 374 ms collection in the tracing
thread. So the engine process:
- raises the collector's thresholds (``THRESHOLDS``: a collection of the youngest generation
  every 50,000 allocations, not 700, and a full one after 100 of the middle's, not 10): a trace
  meets no full collection;
- once it has been idle ``IDLE_S`` after real work (``MIN_YOUNG`` collections of the youngest
  generation since the last time: a run, a trace, a Compare — not a client's status polls),
  collects everything and freezes what survives (``gc.freeze``: later collections do not walk
  it); the next time unfreezes first, so what died since is collected then.
``stacks.log`` (``stack_sampler``) lists every collection of 50 ms or more, to check this.

**With ``GEMMA_WORKBENCH_GC_POLL_S`` > 0** (the default, 0.02 s; 0 gives Python's own collector
back) the automatic collector is off (``gc.disable``) and this thread (``engine-gc``) makes the
younger generations' collections too, looking at the youngest one's count every that many
seconds. Python's own collects in whichever thread allocates past the threshold, the device
thread included, and holds it there for the whole collection: on the v5e young collections of
10-50 k objects took 0.7-3.2 s there, between two steps (gaps of 1.04 and 3.52 s) and inside a
tweak's set-up. On this thread the same collections (0.6-3.7 s) ran while the device thread
went on: no step gap over 0.24 s in that loop (BENCHMARKS.md, "The interactive loop"). A
process busy ``FULL_AT_MOST_S`` without an idle moment still gets a full collection there when
Python's rule (``THRESHOLDS[2]``) would have made one.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

THRESHOLDS = (50_000, 20, 100)
FULL_AT_MOST_S = 600.0
"""With the collector thread: a process never idle still gets a full collection this often."""
THREAD_NAME = "engine-gc"
IDLE_S = 2.0
"""Seconds of idleness (the engine's ``idle_for``) before the collection."""
POLL_S = 0.5
MIN_YOUNG = 20
"""Collections of the youngest generation (each ``THRESHOLDS[0]`` allocations) since the last
idle collection that make the next one worth its time (~1 M allocations)."""


class IdleCollector:
    """``start()``: the thresholds, and a thread that collects once per idle period."""

    def __init__(self, idle_for: Callable[[], float], *, idle_s: float = IDLE_S,
                 poll_s: float = POLL_S, min_young: int = MIN_YOUNG, young_poll_s: float = 0.0,
                 full_at_most_s: float = FULL_AT_MOST_S) -> None:
        self.idle_for = idle_for
        self.idle_s = idle_s
        self.poll_s = poll_s
        self.min_young = min_young
        self.young_poll_s = young_poll_s
        """> 0: this thread makes every collection (the module doc), looking this often."""
        self.full_at_most_s = full_at_most_s
        self.collections = 0
        """Full collections made (while idle; with ``young_poll_s``, also after a long busy time)."""
        self.young = 0
        """Collections of the younger generations made on this thread (``young_poll_s``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._before: tuple[tuple[int, int, int], bool] | None = None
        self._full_at = time.monotonic()

    def start(self) -> IdleCollector:
        self._before = (gc.get_threshold(), gc.isenabled())
        gc.set_threshold(*THRESHOLDS)  # with ``young_poll_s``: the counts ``_collect_young`` reads
        if self.young_poll_s > 0:
            gc.disable()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The thread ends, the heap is unfrozen, the thresholds and the automatic collector
        are put back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        gc.unfreeze()
        if self._before is not None:
            threshold, enabled = self._before
            gc.set_threshold(*threshold)
            if enabled:
                gc.enable()

    def _run(self) -> None:
        young_at = -self.min_young  # the start-up's imports: collected at the first idle time
        tick = min(self.poll_s, self.young_poll_s) if self.young_poll_s > 0 else self.poll_s
        idle_check = 0.0
        while not self._stop.wait(tick):
            if self.young_poll_s > 0:
                self._collect_young()
            now = time.monotonic()
            if now < idle_check:
                continue
            idle_check = now + self.poll_s - tick / 2
            try:
                idle = self.idle_for()
            except Exception:  # noqa: BLE001 - a clock that fails: no collection
                continue
            young = gc.get_stats()[0]["collections"]
            if idle >= self.idle_s and young - young_at >= self.min_young:
                self.collect()
                young_at = gc.get_stats()[0]["collections"]

    def _collect_young(self) -> None:
        """What Python's automatic collector would do now, here: the youngest generation once
        it counts ``THRESHOLDS[0]`` allocations, the middle one with it every ``THRESHOLDS[1]``;
        a full one only after ``full_at_most_s`` without one (otherwise the idle collection's)."""
        young, middle, old = gc.get_count()
        if young < THRESHOLDS[0]:
            return
        generation = 1 if middle + 1 >= THRESHOLDS[1] else 0
        if old + 1 >= THRESHOLDS[2] and time.monotonic() - self._full_at >= self.full_at_most_s:
            generation = 2  # the frozen survivors of the last idle collection are not walked
            self._full_at = time.monotonic()
        gc.collect(generation)
        if generation == 2:
            self.collections += 1
        else:
            self.young += 1

    def collect(self) -> None:
        self._full_at = time.monotonic()
        t0 = time.perf_counter()
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.collections += 1
        log.info("gc: a full collection while idle took %.2f s (%d freed; %d objects kept frozen)",
                 time.perf_counter() - t0, freed, gc.get_freeze_count())
