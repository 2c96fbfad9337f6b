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
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

THRESHOLDS = (50_000, 20, 100)
IDLE_S = 2.0
"""Seconds of idleness (the engine's ``idle_for``) before the collection."""
POLL_S = 0.5
MIN_YOUNG = 20
"""Collections of the youngest generation (each ``THRESHOLDS[0]`` allocations) since the last
idle collection that make the next one worth its time (~1 M allocations)."""


class IdleCollector:
    """``start()``: the thresholds, and a thread that collects once per idle period."""

    def __init__(self, idle_for: Callable[[], float], *, idle_s: float = IDLE_S,
                 poll_s: float = POLL_S, min_young: int = MIN_YOUNG) -> None:
        self.idle_for = idle_for
        self.idle_s = idle_s
        self.poll_s = poll_s
        self.min_young = min_young
        self.collections = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._before: tuple[int, int, int] | None = None

    def start(self) -> IdleCollector:
        self._before = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)
        self._thread = threading.Thread(target=self._run, name="idle-gc", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The thread ends, the heap is unfrozen and the thresholds are put back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        gc.unfreeze()
        if self._before is not None:
            gc.set_threshold(*self._before)

    def _run(self) -> None:
        young_at = -self.min_young  # the start-up's imports: collected at the first idle time
        while not self._stop.wait(self.poll_s):
            try:
                idle = self.idle_for()
            except Exception:  # noqa: BLE001 - a clock that fails: no collection
                continue
            young = gc.get_stats()[0]["collections"]
            if idle >= self.idle_s and young - young_at >= self.min_young:
                self.collect()
                young_at = gc.get_stats()[0]["collections"]

    def collect(self) -> None:
        t0 = time.perf_counter()
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.collections += 1
        log.info("gc: a full collection while idle took %.2f s (%d freed; %d objects kept frozen)",
                 time.perf_counter() - t0, freed, gc.get_freeze_count())
