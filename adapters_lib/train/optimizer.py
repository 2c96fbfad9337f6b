"""The optimizer: optax AdamW with a warm-up + decay schedule and global-norm clipping.

Pure and small, like optax itself: ``make_schedule(spec)`` gives the learning rate as a
function of the step (the loop logs it), ``make_optimizer(spec)`` the transformation.
Weight decay skips norms/scales and every 1-D param (biases, norm scales): decaying those
only hurts.
"""

from __future__ import annotations

from typing import Any

import jax
import optax

from adapters_lib.config import TrainSpec

_NO_DECAY_WORDS = ("norm", "scale")


def make_schedule(spec: TrainSpec) -> optax.Schedule:
    """Linear warm-up over ``warmup_steps`` then constant, linear-to-zero or cosine decay."""
    peak = spec.learning_rate
    warmup = min(spec.warmup_steps, max(spec.steps - 1, 0))
    decay_steps = max(spec.steps - warmup, 1)
    if spec.schedule == "constant":
        after = optax.constant_schedule(peak)
    elif spec.schedule == "linear":
        after = optax.linear_schedule(peak, 0.0, decay_steps)
    elif spec.schedule == "cosine":
        after = optax.cosine_decay_schedule(peak, decay_steps)
    else:  # validated by config; kept for direct callers
        raise ValueError(f"unknown schedule {spec.schedule!r}")
    if warmup == 0:
        return after
    # Warm-up starts at peak/warmup (not 0) so that step 0 already moves the params.
    ramp = optax.linear_schedule(peak / (warmup + 1), peak, warmup)
    return optax.join_schedules([ramp, after], [warmup])


def decay_mask(params: Any) -> Any:
    """True where weight decay applies: ≥2-D params whose path names no norm or scale."""

    def keep(path: tuple, leaf: Any) -> bool:
        names = "/".join(str(getattr(k, "key", k)) for k in path).lower()
        if any(word in names for word in _NO_DECAY_WORDS):
            return False
        return getattr(leaf, "ndim", 0) >= 2

    return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(spec: TrainSpec) -> optax.GradientTransformation:
    """AdamW (b1 0.9, b2 0.999) on ``make_schedule(spec)``, clipped to ``clip_norm`` (0 = off)."""
    parts = []
    if spec.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(spec.clip_norm))
    parts.append(optax.adamw(make_schedule(spec), b1=0.9, b2=0.999, eps=1e-8,
                             weight_decay=spec.weight_decay, mask=decay_mask))
    return optax.chain(*parts)
