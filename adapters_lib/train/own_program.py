"""When a LoRA family run's own program compiles, and how it takes over.

A tweak of rank, alpha or targets trains at once in the LoRA family's compiled program
(``lora.family``); the run's own (exact) program compiles behind and takes over once ready
(``GemmaTrainer._take_over``): at the Gemma-3-1B shape on a v5e a rank-128 family's step cost
7.6-39 % more than the run's own, the rank-32 one nothing (BENCHMARKS.md, "TPU v5e"). That
compile takes what a cold one does (55-120 s on a v5e), so for a run shorter than that it only
costs: on a v5e, a loop of 10-step tweaks queued one such compile per run, each ending after its
run, and the programs the next runs and the Compare needed waited behind them. So the run's own
program compiles once the run is seen to have more than ``worth_s()`` seconds left (its step
time measured over its first steps), and never for a run that ends sooner: it trains on in the
family's program.

``GEMMA_WORKBENCH_TAKEOVER_AFTER_S``: those seconds (default ``DEFAULT_WORTH_S``); 0 compiles the
run's own program from the set-up on, whatever the run's length.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

ENV = "GEMMA_WORKBENCH_TAKEOVER_AFTER_S"
DEFAULT_WORTH_S = 120.0
"""About a train step's XLA compile on the v5e (the 270M's ~55-75 s, the 1B's ~95-120 s): a run
with less left ends before its own program would be ready."""
MEASURED_STEPS = 2
"""Steps timed before the run's length in seconds is judged (step 1's own wait left out)."""


def worth_s() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV, DEFAULT_WORTH_S)))
    except ValueError:
        log.warning("%s is %r, not seconds: %.0f s", ENV, os.environ.get(ENV), DEFAULT_WORTH_S)
        return DEFAULT_WORTH_S


def later(start: Callable[[], None], total_steps: int) -> OwnProgramLater | None:
    """``start`` now (``worth_s()`` 0: None), or an ``OwnProgramLater`` to ask before each step."""
    worth = worth_s()
    if worth == 0:
        start()
        return None
    return OwnProgramLater(start, total_steps, worth)


class OwnProgramLater:
    """``start`` (it queues the run's own program's compiles) called by ``due`` once the run
    has more than ``worth`` seconds left; or never."""

    def __init__(self, start: Callable[[], None], total_steps: int, worth: float):
        self.start, self.total, self.worth = start, int(total_steps), float(worth)
        self.calls = 0
        self.since: tuple[int, float] | None = None
        self.done = False

    def due(self, step: int, now: float | None = None) -> bool:
        """Called before each step (the global index): True once ``start`` ran. The clock starts
        at the second call: the first step's time (a compile, a program's load) is left out."""
        if self.done:
            return True
        now = time.perf_counter() if now is None else now
        self.calls += 1
        if self.calls == 2:
            self.since = (step, now)
        if self.since is None:
            return False
        first, t0 = self.since
        if step - first < MEASURED_STEPS:
            return False
        per_step = (now - t0) / (step - first)
        left = (self.total - step + 1) * per_step
        if left < self.worth:
            if step - first == MEASURED_STEPS:  # said once
                log.info("LoRA: the run's own program is not compiled: %.0f s left at %.2f s a step, less "
                         "than its compile (%s = %.0f s); the family's program serves the run", left,
                         per_step, ENV, self.worth)
            return False
        log.info("LoRA: the run's own program compiles behind from step %d (%.0f s left)", step, left)
        self.done = True
        self.start()
        return True


class Takeover:
    """A family run's own program (``plan.own_steps``): its compiles queued behind once the run
    is seen to outlast them (``later``), then, once compiled, the run's state moved to its
    shapes (the same values: the family's padding is zeros). ``drop`` at the run's end: the
    compiles not started leave the queue (one under way finishes)."""

    def __init__(self, plan: Any, steps: Any, eval_data: list, total_steps: int):
        self.plan, self.steps, self.eval_data = plan, steps, eval_data
        self.futures: list[Any] = []  # the own eval steps', then the move's (last)
        self.jobs: list[Any] = []
        self.failed = False
        self.timing = later(self._start, total_steps)

    def _start(self) -> None:
        from adapters_lib.train.plan import compile_takeover

        program, args = self.plan.behind[0]
        first = program.compile_behind(*args)
        self.futures = [*self.plan.own_steps.compile_eval_behind(self.eval_data),
                        compile_takeover(self.steps, self.plan.own)]
        self.jobs = [f for f in [first, *self.futures] if f is not None]

    def poll(self, step: int, state: Any) -> Any:
        """Before step ``step``: the state in the run's own shapes once its program is compiled
        (then the run's steps are ``plan.own_steps``); None until then, or when it failed
        (``failed``: the family's program serves on)."""
        import jax

        from adapters_lib.train.compiled_steps import TrainState
        from adapters_lib.train.plan import ready

        if self.timing is not None and self.timing.due(step):
            self.timing = None
        own = self.plan.own_steps
        if not self.futures or not ready(own, self.plan.behind[0][1]) or not all(f.done() for f in self.futures):
            return None
        try:
            move = self.futures[-1].result()  # the compiled move (``plan.compile_takeover``)
        except Exception as e:  # noqa: BLE001 - the family's program keeps serving
            log.warning("LoRA: the takeover program failed to compile (%s); the family's program serves on", e)
            self.failed = True
            return None
        params, opt = move(state.params, state.opt_state)
        return TrainState(state.step, jax.device_put(params, own.trainable_shardings),
                          jax.device_put(opt, own.state_shardings.opt_state))

    def drop(self) -> None:
        dropped = sum(f.cancel() for f in self.jobs)
        if dropped:
            log.info("LoRA: the run's own program not started by its end: %d compile(s) dropped", dropped)
