"""Fresh LoRA adapters, made on the host in numpy: A flax's kaiming-uniform, B zeros.

No program is compiled for them, so a new rank costs no compile: a jitted initialiser per A
shape (and an eager ``zeros`` per B shape) made ``init_lora`` of a rank 8 -> 16 tweak take
0.7 s at the Gemma-3-1B shape on 2 CPU cores (0.03 s so).

Each A is a function of the seed, its path and its shape alone:

- its bound is flax's ``kaiming_uniform()`` for its shape (``variance_scaling(2, "fan_in",
  "uniform")``, in axis -2, out axis -1: ``fan_in`` = the product of every axis but the last,
  the rank, so the bound is the same at every rank): values uniform in ``[-bound, bound)``;
- its numbers come from numpy's PCG64 seeded with the key's words and a hash of the path (the
  same in every process, on every host), drawn with the last axis outermost: a rank-r adapter's
  A is the first r columns of a larger rank's, and an adapter's values do not depend on which
  other targets the run has.

Under a JAX trace (``jax.eval_shape``, ``jax.jit``) the same values come through
``jax.pure_callback``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def kaiming_bound(shape: Sequence[int]) -> np.float32:
    """flax's ``kaiming_uniform()`` bound for ``shape``: ``sqrt(3 · 2 / fan_in)`` in float32,
    ``fan_in`` = ``shape[-2]`` times the receptive field (every axis but the last two)."""
    fan_in = math.prod(shape[:-1])
    return np.sqrt(np.float32(3) * np.float32(2.0 / fan_in))


def _key_data(rng: Any) -> Any:
    """A JAX key's ``uint32`` words (typed or raw)."""
    return jax.random.key_data(rng) if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key) else rng


def _words(data: Any) -> list[int]:
    return [int(w) for w in np.asarray(data, np.uint32).ravel()]


def a_values(words: Sequence[int], path: Any, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """One adapter A: ``shape`` of ``dtype``, from the key's ``words`` and the leaf's ``path``."""
    digest = hashlib.blake2b(jax.tree_util.keystr(tuple(path)).encode(), digest_size=16).digest()
    gen = np.random.default_rng(np.random.SeedSequence([*words, int.from_bytes(digest, "little")]))
    shape = tuple(int(d) for d in shape)
    drawn = gen.random((shape[-1], *shape[:-1]), dtype=np.float32)  # the rank axis outermost
    values = (drawn * np.float32(2) - np.float32(1)) * kaiming_bound(shape)
    return np.moveaxis(values, 0, -1).astype(dtype)


def init_adapters(leaves: list, tree: Any, dtype: Any, rng: jax.Array, *,
                  is_b: Callable[[str], bool]) -> Any:
    """Fresh LoRA params from abstract ``(path, shape)`` leaves (``tree_flatten_with_path``):
    B zeros (``is_b`` of the last path key), A ``a_values``; arrays on JAX's default device
    (with a traced ``rng``: A through ``jax.pure_callback``). gm.nn.LoRA's trees too (the bench
    reference)."""
    dtype = jnp.dtype(dtype)
    b = [is_b(str(getattr(p[-1], "key", p[-1]))) for p, _ in leaves]
    a_leaves = [(p, tuple(x.shape)) for (p, x), zero in zip(leaves, b, strict=True) if not zero]

    def host(words: Sequence[int]) -> list[np.ndarray]:
        return [a_values(words, p, shape, dtype) for p, shape in a_leaves]

    if isinstance(rng, jax.core.Tracer):
        made = iter(jax.pure_callback(lambda d: host(_words(d)), [jax.ShapeDtypeStruct(s, dtype) for _, s in a_leaves],
                                      _key_data(rng)))
        return jax.tree.unflatten(tree, [jnp.zeros(x.shape, dtype) if zero else next(made)
                                         for (_, x), zero in zip(leaves, b, strict=True)])
    made = iter(host(_words(_key_data(rng))))
    out = [np.zeros(x.shape, dtype) if zero else next(made) for (_, x), zero in zip(leaves, b, strict=True)]
    return jax.tree.unflatten(tree, jax.device_put(out))  # one transfer, no program compiled
