"""A step's dead arrays are dropped on a thread of their own (``drop``), not the device thread.

Each ``jax.Array`` that dies lets the GIL go and takes it back. The state that a step donates
is dropped once the next state is in hand. For the Gemma-3-1B's rank-32 family that is about
1,100 arrays: adapters, and the optimizer's two moments. Beside a compile thread that traces
(Python, in short native calls), each take-back of the GIL waits for that thread to let it go.
- On the v5e, steps of 0.31 s took 1.5–3.1 s while a compile job traced beside them for 7 s.
  The stack sampler was 2–16 ms late all that window and 0 ms before and after, and the
  device was idle between the steps.
- On this CPU (``bench.gil_waits --dry``: the 1B's reduced shape, 171 state arrays), beside a
  Python-busy thread, a step took 25–205 ms over 9 processes (158–205 in 5) with its state
  dropped on its own thread, 28–60 ms with the state handed here, and 14–17 ms alone.

On the reaper's thread the same waits hold up nothing the device waits for. The buffers of
donated arrays are gone already, so dropping them later costs no device memory. Anything else
handed over is dropped as soon as the reaper has the GIL. On the v5e since (``check gil``,
the 1B's full shape, 1,095 arrays), beside a Python-busy thread at Python's 5 ms switch
interval, a step of 147 ms alone took 746 ms with its state dropped on its own thread and
209 ms with it handed here; in the loop, the 1B's slow steps did not recur.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

THREAD_NAME = "array-reaper"
_queue: queue.SimpleQueue = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def drop(obj: Any) -> None:
    """Hand ``obj`` over: its last reference goes on the reaper's thread. The caller must drop
    its own references (``del``) after the call."""
    global _thread
    if _thread is None:
        with _lock:
            if _thread is None:
                _thread = threading.Thread(target=_run, name=THREAD_NAME, daemon=True)
                _thread.start()
    _queue.put(obj)


def settle(timeout: float = 10.0) -> bool:
    """Wait until everything handed over so far is dropped (the tests' check)."""
    if _thread is None:
        return True
    done = threading.Event()
    _queue.put(done)
    return done.wait(timeout)


def _run() -> None:
    while True:
        obj = _queue.get()
        if isinstance(obj, threading.Event):
            obj.set()
        del obj  # the last reference: its arrays are destroyed here
