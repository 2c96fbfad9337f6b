"""What the checks train: a named release's shape (the demo's under ``--dry``), random
weights made on the device, and the run config."""

from __future__ import annotations

from typing import Any

DRY = False
"""``--dry``: the demo model's shape and short sequences on this machine's CPU (set by
``__main__``; ``bench.family_cost`` sets it too)."""


def shape_model(name: str) -> Any:
    """A gemma model of a named release's shape (bf16 compute); ``--dry``: the demo model."""
    from bench.memory_fit import text_model

    return text_model("demo" if DRY else name)


def random_params(model: Any, dtype: str = "bfloat16") -> Any:
    """Random base weights in ``dtype``, made leaf by leaf on the device (a 4B model's f32
    ``init`` would not fit one 16 GiB chip): one small program a leaf shape, 26-32 s for the 1B
    cold on the v5e, 6-9 s with the compile cache. One program making every leaf (``rbg`` keys)
    took 194 s cold there (2026-12-06): XLA:TPU compiles ~340 RNG outputs slowly."""
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, 8), jnp.int32))["params"], jax.random.key(0))
    leaves, tree = jax.tree.flatten(shapes)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    make = jax.jit(lambda k, shape: (jax.random.normal(k, shape, jnp.float32) * 0.02).astype(dtype),
                   static_argnums=1)
    return jax.tree.unflatten(tree, [make(k, s.shape) for k, s in zip(keys, leaves, strict=True)])


def _config(batch: int, seq: int, rank: int = 16, **train: Any) -> Any:
    from bench.measures import _cfg

    return _cfg(lora={"rank": rank, "alpha": 2.0 * rank, "targets": ["all"], "dtype": "float32"},
                train={"batch_size": batch, "compute_dtype": "bfloat16", "param_dtype": "bfloat16",
                       "learning_rate": 1e-4, "schedule": "constant", "warmup_steps": 0, **train},
                data={"max_length": seq})
