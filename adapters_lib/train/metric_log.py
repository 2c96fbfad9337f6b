"""The gemma route's per-step metrics: held on the device, fetched in groups (``MetricLog``)."""

from __future__ import annotations

import time
from typing import Any


class MetricLog:
    """Per-step metrics held on device and fetched in groups (one host sync per group).

    A step that compiled in the foreground (``compile_watch``) carries ``compile_s`` in its
    record; the other steps of its group are timed without it."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.pending: list[tuple[int, Any, int]] = []
        self.last_time = time.perf_counter()
        self.extra = trainer.s.steps.objective.metrics
        self.compiles: dict[int, float] = {}
        self.watch: Any = None

    def watch_compiles(self, steps: Any) -> None:
        from adapters_lib.train.compile_watch import CompileWatch

        self.watch = CompileWatch(self.trainer.session, steps)

    def add(self, step: int, metrics: Any, n_tokens: int) -> None:
        self.pending.append((step, metrics, n_tokens))
        seconds = self.watch.take() if self.watch is not None else 0.0
        if seconds:
            self.compiles[step] = seconds

    def flush(self, *, everything: bool, hold: int | None = None) -> dict[str, Any] | None:
        """Record the pending steps (all but the newest unless ``everything``); the record of
        step ``hold`` comes back unwritten."""
        import jax

        todo = self.pending if everything else self.pending[:-1]
        if not todo:
            return None
        self.pending = self.pending[len(todo):]
        fetched = jax.device_get([m for _, m, _ in todo])
        now = time.perf_counter()
        compiles = {step: self.compiles.pop(step) for step, _, _ in todo if step in self.compiles}
        per_step = max(0.0, now - self.last_time - sum(compiles.values())) / len(todo)
        self.last_time = now
        held = None
        for (step, _, n_tokens), m in zip(todo, fetched, strict=True):
            extra = {k: float(m[k]) for k in self.extra}
            if step in compiles:
                extra["compile_s"] = compiles[step]
            out = self.trainer.step_record(step, loss=float(m["loss"]), grad_norm=float(m["grad_norm"]),
                                           n_tokens=n_tokens, seconds=per_step + compiles.get(step, 0.0),
                                           extra=extra, hold=step == hold)
            held = out if step == hold else held
        return held
