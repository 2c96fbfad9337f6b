"""Where a tuned model's load spends its time, by phase, for the log of whoever waits on it.

The Compare warm-up after a run (``engine.warm_compare``) loads the run's tuned model on the
device thread, and the next run or a Compare request waits for it (1.2-1.8 s of the 1B's
loop on the v5e). Its log line names the phases:

- ``config``: the run's config read, its checkpoint listed;
- ``base``: the base model (the model cache's, loaded earlier in this process);
- ``adapters``: the checkpoint's trained tree (in memory after the run, else orbax's read);
- ``sides``: the tuned model built: the tree cast to a generation dtype, folded into its LoRA
  family (``sample.family``) and placed, the sampler made.

``with recording() as phases:`` around a load; the loading code calls ``mark(name)`` at the end
of each phase (the time since the previous mark or the recording's start is added to it).
Per thread: a load on another thread is not counted. Nothing is recorded outside a recording
(a cached model records nothing: ``phases`` stays empty).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from adapters_lib.train.plan import Timeline

_local = threading.local()


@contextlib.contextmanager
def recording() -> Iterator[dict[str, float]]:
    """A dict that fills with ``{phase: seconds}`` while the block runs (this thread's marks)."""
    outer = getattr(_local, "clock", None)
    _local.clock = clock = Timeline()
    try:
        yield clock.phases
    finally:
        _local.clock = outer


def mark(name: str) -> None:
    """End the phase ``name`` now (``Timeline.mark``); nothing outside a recording."""
    clock = getattr(_local, "clock", None)
    if clock is not None:
        clock.mark(name)


def describe(phases: dict[str, float]) -> str:
    """``"config 0.0, base 0.0, adapters 0.9, sides 0.3"``; "" when nothing was recorded."""
    return ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
