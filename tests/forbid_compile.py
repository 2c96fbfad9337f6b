"""``forbid_compiles()``: a block of code that must compile nothing in the foreground.

vLLM TPU's ``ForbidCompile`` idea (``VLLM_XLA_CHECK_RECOMPILATION``): after warm-up, a compile
is a bug, so a test makes it an error instead of letting it cost a user 90 s on a chip. Inside
the block, the thread that entered it raises ``ForegroundCompile`` as soon as it

- starts tracing, lowering or compiling a jitted function (JAX's own monitoring events, which
  fire as each phase *starts*: ``jax.monitoring.register_scalar_listener``), or
- runs a step whose program is not compiled, or waits for one compiling behind (the step
  programs' foreground jobs, ``step_programs.listen``).

The compile queue's thread (``compile_queue``) and other threads may compile meanwhile: that
is what compiling ahead is for. ``allowed`` lists what did happen elsewhere, for the test to
read (``ForbidCompile.behind``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


class ForegroundCompile(AssertionError):
    """A compile where none may happen."""


@dataclass
class ForbidCompile:
    thread: int
    seen: list[str] = field(default_factory=list)
    """What the guarded thread started to compile (it raised at the first)."""
    behind: list[dict[str, Any]] = field(default_factory=list)
    """Compile-queue jobs that changed state meanwhile on other threads (allowed)."""

    def on_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        if event in COMPILE_EVENTS and threading.get_ident() == self.thread:
            what = f"{event.rsplit('/', 1)[-1].removesuffix('_duration')} of {kwargs.get('fun_name', '?')}"
            self.seen.append(what)
            raise ForegroundCompile(f"a foreground compile where none may happen: {what}")

    def on_job(self, job: dict[str, Any]) -> None:
        """(A listener's exception is logged, not raised: the block's end raises for it.)"""
        if job.get("where") == "foreground" and threading.get_ident() == self.thread:
            if job.get("state") == "compiling":
                self.seen.append(f"{job['what']}: a step compiled it or waited for it")
        else:
            self.behind.append(job)


@contextlib.contextmanager
def forbid_compiles() -> Iterator[ForbidCompile]:
    """Inside the block, this thread compiles nothing (see the module doc) or raises."""
    import jax

    from adapters_lib.train import step_programs

    guard = ForbidCompile(threading.get_ident())
    jax.monitoring.register_scalar_listener(guard.on_scalar)
    stop = step_programs.listen(guard.on_job)
    try:
        yield guard
    finally:
        stop()
        jax.monitoring.unregister_scalar_listener(guard.on_scalar)
    if guard.seen:
        raise ForegroundCompile(f"foreground compiles where none may happen: {guard.seen}")
