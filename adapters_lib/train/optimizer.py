"""The optimizer: optax AdamW with a warm-up + decay schedule and global-norm clipping.

Pure and small, like optax itself: ``make_schedule(spec)`` gives the learning rate as a
function of the step (the loop logs it), ``make_optimizer(spec)`` the transformation; the
schedule's numbers are inputs of the train step (``Scheduled.at``), so a learning-rate sweep
or a longer run compiles no new step.
Weight decay skips norms/scales and every 1-D param (biases, norm scales): decaying those
only hurts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from adapters_lib.config import TrainSpec

_NO_DECAY_WORDS = ("norm", "scale")


SCHEDULES = ("constant", "linear", "cosine")


def schedule_hparams(spec: TrainSpec) -> dict[str, float]:
    """The schedule's numbers — peak learning rate, warm-up steps, decay steps — as floats.

    The train step takes them as inputs (``Scheduled.at``), not as constants compiled into
    it: runs that differ only in learning rate or length (sweep points, a longer run) share
    one compiled step."""
    warmup = min(spec.warmup_steps, max(spec.steps - 1, 0))
    return {"peak": float(spec.learning_rate), "warmup": float(warmup),
            "decay": float(max(spec.steps - warmup, 1))}


def _kind(spec: TrainSpec) -> str:
    """``spec.schedule``, checked (config validates it; kept for direct callers)."""
    if spec.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {spec.schedule!r}")
    return spec.schedule


def schedule_value(count: Any, hparams: Any, kind: str, xp: Any = jnp) -> jax.Array:
    """The learning rate at step ``count``: a linear warm-up from ``peak/(warmup+1)`` to ``peak``
    over ``warmup`` steps (so step 0 already moves the params), then ``kind``: constant,
    linear to zero or cosine to zero over ``decay`` steps. ``hparams`` may be traced.
    ``xp``: the array module (``numpy`` for the host's log: no device op, nothing to compile)."""
    count = xp.asarray(count, xp.float32)
    peak, warm, decay = (xp.asarray(hparams[k], xp.float32) for k in ("peak", "warmup", "decay"))
    done = xp.clip(count - warm, 0.0, decay) / decay
    if kind == "constant":
        after = peak
    elif kind == "linear":
        after = peak * (1.0 - done)
    else:
        after = peak * 0.5 * (1.0 + xp.cos(xp.pi * done))
    start = peak / (warm + 1.0)
    ramp = start + (peak - start) * xp.minimum(count, warm) / xp.maximum(warm, 1.0)
    return xp.where(count < warm, ramp, after)


def make_schedule(spec: TrainSpec) -> optax.Schedule:
    """``spec``'s learning rate as a function of the step (what the loop logs), on the host:
    the same float32 arithmetic as the step's, with no device op to compile."""
    import numpy as np

    hparams, kind = schedule_hparams(spec), _kind(spec)
    return lambda count: schedule_value(count, hparams, kind, xp=np)


def decay_mask(params: Any) -> Any:
    """True where weight decay applies: ≥2-D params whose path names no norm or scale."""

    def keep(path: tuple, leaf: Any) -> bool:
        names = "/".join(str(getattr(k, "key", k)) for k in path).lower()
        if any(word in names for word in _NO_DECAY_WORDS):
            return False
        return getattr(leaf, "ndim", 0) >= 2

    return jax.tree_util.tree_map_with_path(keep, params)


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """AdamW (b1 0.9, b2 0.999) on ``spec``'s schedule, clipped to ``clip_norm`` (0 = off).

    An optax ``GradientTransformation`` (``init``/``update``) for ``spec``'s own numbers, and
    ``at(hparams)``: the same transformation with the schedule's numbers given (traced arrays in
    the train step). The optimizer state's layout does not depend on them."""

    spec: TrainSpec

    @property
    def hparams(self) -> dict[str, float]:
        return schedule_hparams(self.spec)

    def at(self, hparams: Any) -> optax.GradientTransformation:
        kind = _kind(self.spec)
        parts = []
        if self.spec.clip_norm > 0:
            parts.append(optax.clip_by_global_norm(self.spec.clip_norm))
        parts.append(optax.adamw(lambda count: schedule_value(count, hparams, kind), b1=0.9, b2=0.999,
                                 eps=1e-8, weight_decay=self.spec.weight_decay, mask=decay_mask))
        return optax.chain(*parts)

    def init(self, params: Any) -> Any:
        return self.at(self.hparams).init(params)

    def update(self, updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        return self.at(self.hparams).update(updates, state, params)


def make_optimizer(spec: TrainSpec) -> Scheduled:
    """AdamW on ``make_schedule(spec)``, clipped to ``clip_norm`` (0 = off): see ``Scheduled``."""
    _kind(spec)  # an unknown schedule fails here, not at the first step
    return Scheduled(spec)
