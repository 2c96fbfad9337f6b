"""LoRA's low-rank product ``scale · (x @ A) @ B`` with its own backward (``lora.einsum`` calls it).

Autodiff of ``x @ a`` computes ``∂a = xᵀ · ∂u``, and XLA then transposes the whole activation
``x`` into a copy before the matmul; the backward here transposes only the rank-r sides
(``∂a = (∂uᵀ · x)ᵀ``, ``∂b = uᵀ · ∂y``), so no activation is copied.

**Where it applies:** every adapted einsum of ``lora.einsum`` (training, sampling,
evaluation), on every platform: it is a ``jax.custom_vjp`` over plain ``jnp.dot``s, not a
Pallas kernel, so nothing replaces it off a TPU; what it replaces is autodiff's backward of
the same product (the same numbers, the activation transposed into a copy). It lives with the
kernels because, like them, it exists for the TPU step's speed and memory.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def lora_matmul(x: jax.Array, a: jax.Array, b: jax.Array, scale: float) -> jax.Array:
    """``scale · (x @ a) @ b`` over the last axis of ``x`` (``a: in × r``, ``b: r × out``)."""
    return lora_matmul_slots(x, a, (b,), scale)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def lora_matmul_slots(x: jax.Array, a: jax.Array, bs: tuple[jax.Array, ...], scale: float) -> tuple[jax.Array, ...]:
    """``lora_matmul`` for targets that share an input (gate and up): one pass over ``x``
    (``a``: their A matrices side by side, ``in × n·r``), then each ``r`` columns of
    ``u = scale · x @ a`` times its own ``b`` (``r × out``): one output per target, and no
    ``[..., n·out]`` array forward or backward."""
    return _fwd(x, a, bs, scale)[0]


def _fwd(x, a, bs, scale):
    u = jnp.dot(x, a) * jnp.asarray(scale, x.dtype)  # scale the rank-r intermediate, not the output
    r = a.shape[1] // len(bs)
    return tuple(jnp.dot(u[..., i * r:(i + 1) * r], b) for i, b in enumerate(bs)), (x, a, bs, u)


def _bwd(scale, res, gs):
    x, a, bs, u = res
    r = a.shape[1] // len(bs)
    x2 = x.reshape(-1, x.shape[-1])
    u2 = u.reshape(-1, u.shape[-1])
    g2 = [g.reshape(-1, g.shape[-1]) for g in gs]
    dbs = tuple(jnp.dot(u2[:, i * r:(i + 1) * r].T, g).astype(b.dtype)
                for i, (g, b) in enumerate(zip(g2, bs, strict=True)))
    gu = jnp.concatenate([jnp.dot(g, b.T) for g, b in zip(g2, bs, strict=True)], axis=1) * jnp.asarray(scale, x.dtype)
    da = jnp.dot(gu.T, x2).T
    dx = jnp.dot(gu, a.T).reshape(x.shape)
    return dx.astype(x.dtype), da.astype(a.dtype), dbs


lora_matmul_slots.defvjp(_fwd, _bwd)
