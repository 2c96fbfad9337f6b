"""While a run's steps run, the engine's other Python threads hand the GIL back sooner.

A program traced and lowered behind the steps (the run's own program while a LoRA family's
serves, the Compare's sampler, eval's scorer) is Python on another thread. CPython makes a
thread that wants the GIL wait up to the switch interval (5 ms) each time it asks, and the
step loop asks many times a step (the dispatch, the metrics one step behind, the log): beside a
tracer, the median host time of a small jitted step with 20 fetches went from 1.3–3.8 ms alone
to 7.8–13.3 ms at 5 ms, and 1.9–2.9 ms at 0.5 ms (this 2-core machine, ``/tmp`` experiment of
2026-12-06, two runs); on the v5e the 1B's steps ran at 3–11 k tok/s instead of 25 k while its
own program traced behind them. So while steps run the interval is ``STEPS_INTERVAL``; the
tracer then yields more often (it is slower by the switches, the steps are not). A C call that
holds the GIL (a serialization, an MLIR pass) is not shortened by this.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

STEPS_INTERVAL = 0.0005
"""Seconds (``sys.setswitchinterval``) while a run's steps run."""

_lock = threading.Lock()
_running = 0
_saved: float | None = None


def steps_running() -> Callable[[], None]:
    """Until the returned function is called (idempotent; nested runs counted), the switch
    interval is ``STEPS_INTERVAL``; then the one before."""
    global _running, _saved
    with _lock:
        if _running == 0:
            _saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_saved, STEPS_INTERVAL))
        _running += 1
    done = False

    def release() -> None:
        global _running, _saved
        nonlocal done
        with _lock:
            if done:
                return
            done = True
            _running -= 1
            if _running == 0 and _saved is not None:
                sys.setswitchinterval(_saved)
                _saved = None

    return release
