"""Block-sparse attention for training: the masked-out blocks of the score matrix are never computed.

gemma's ``Attention`` scores every query against every key (``[B, T, N, T]``) and then masks:
half of a causal layer's scores and all but ``window`` keys of a sliding-window layer's are
thrown away. While training (no KV cache) ``blocked()`` computes the same attention in blocks
that skip them:

- sliding-window layers: queries in blocks of ``window``; each block scores its own keys and
  the previous block's (``2·window`` keys instead of ``T``);
- global layers: queries in blocks of ``GLOBAL_BLOCK``; block ``i`` scores keys ``[0, (i+1)·b)``
  (about half the causal square).

Everything else is gemma's own code path: the q/kv/output einsums (so LoRA adapters apply),
qk-norm, RoPE, the query scaling, the logit soft-cap, ``K_MASK`` and a softmax in the
logits' dtype. A row whose keys are all masked (padding) is uniform over its block's keys
instead of over all keys; padding carries no loss, so losses and gradients are unchanged.
Sampling (a KV cache) goes through gemma unchanged.

``training_attention(kind)`` chooses: ``blocked`` (above, the default on a CPU), ``splash``
(JAX's Pallas flash-attention kernel for TPUs, ``attention_splash``: the default on a TPU;
shapes it does not take fall back to ``blocked``) or one fused ``jax.nn.dot_product_attention``
call (``fused_attention``): ``cudnn`` flash attention on an NVIDIA GPU, ``xla`` anywhere (dense,
the reference the CPU tests compare with gemma).

The key blocks rely on what the train step guarantees: inside one packed example the
positions advance by one per token, so a key more than ``window`` tokens back is out of the
window or in another example (masked either way).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from gemma.gm.math import _positional_embeddings
from gemma.gm.nn import _modules

from adapters_lib.kernels import attention_splash
from adapters_lib.memory.estimate import (
    ATTENTION_GLOBAL_BLOCK as GLOBAL_BLOCK,  # the estimate uses it too
)
from adapters_lib.models import families

KINDS = ("blocked", "splash", "xla", "cudnn")
"""How training attention is computed: ``blocked`` (block-sparse scores, below), ``splash``
(the Pallas TPU kernel, ``attention_splash``), or one fused ``jax.nn.dot_product_attention``
call with that implementation (``fused_attention``)."""


def default_kind(platform: str) -> str:
    """cuDNN's fused (flash) attention on an NVIDIA GPU, the splash kernel on a TPU, block-sparse
    scores on a CPU (there the fused XLA implementation materialises every score, as gemma does)."""
    if platform in ("gpu", "cuda"):
        return "cudnn"
    return "splash" if platform == "tpu" else "blocked"


@contextlib.contextmanager
def training_attention(kind: str = "blocked", mesh: Any = None) -> Iterator[None]:
    """Within this context, gemma ``Attention`` calls without a cache use ``kind`` (``KINDS``);
    ``mesh``: the step's, for a kernel that runs per device (``splash``)."""
    if kind not in KINDS:
        raise ValueError(f"attention kind {kind!r}: choose one of {KINDS}")
    with nn.intercept_methods(functools.partial(_intercept, kind, mesh)):
        yield


def blocked() -> contextlib.AbstractContextManager[None]:
    """``training_attention("blocked")``."""
    return training_attention("blocked")


def _intercept(kind, mesh, next_fun, args, kwargs, context):
    module = context.module
    # the attention classes of the families' tables (Gemma 2/3's: this module re-implements
    # its __call__); any other attention goes through the library unchanged
    if context.method_name != "__call__" or not isinstance(module, families.layer_types("attention")):
        return next_fun(*args, **kwargs)
    names = ("x", "segment_pos", "cache", "attn_mask")
    bound = dict(zip(names, args, strict=False)) | kwargs
    if bound.get("cache") is not None or set(bound) != set(names):
        return next_fun(*args, **kwargs)
    return None, _attention(module, bound["x"], bound["segment_pos"], bound["attn_mask"], kind, mesh)


def _attention(m: nn.Module, x: jax.Array, positions: jax.Array, mask: jax.Array,
               kind: str = "blocked", mesh: Any = None) -> jax.Array:
    """gemma's ``Attention.__call__`` without a cache, its scores computed as ``kind`` says."""
    if m.use_qkv_einsum:
        query, key, value = m.qkv_einsum("BTD,SNDH->SBTNH", x)
    else:
        query = m.q_einsum("BTD,NDH->BTNH", x)
        key, value = m.kv_einsum("BSD,CKDH->CBSKH", x)
    if m.use_qk_norm:
        query = m._query_norm(query)  # noqa: SLF001 - gemma's own submodules
        key = m._key_norm(key)  # noqa: SLF001
    rope = dict(base_frequency=m.rope_base_frequency, scale_factor=m.rope_scale_factor)
    query = _positional_embeddings.apply_rope(query, positions, **rope) * m.query_pre_attn_scalar
    key = _positional_embeddings.apply_rope(key, positions, **rope)
    window = m.sliding_window_size if m.attn_type == _modules.AttentionType.LOCAL_SLIDING else None
    if m.attn_type == _modules.AttentionType.LOCAL_SLIDING and window is None:
        raise ValueError("Sliding_window_size must be set if Local Sliding attention type")
    if kind == "splash" and attention_splash.supported(query, key):
        encoded = attention_splash.splash_attention(query, key, value, mask, window=window,
                                                    soft_cap=m.attn_logits_soft_cap, mesh=mesh)
    elif kind in ("xla", "cudnn") and m.attn_logits_soft_cap is None:  # these have no soft-cap
        encoded = fused_attention(query, key, value, mask, positions, window=window, implementation=kind)
    else:
        encoded = block_sparse_attention(query, key, value, mask, positions, window=window,
                                         soft_cap=m.attn_logits_soft_cap)
    return m.attn_vec_einsum("BTNH,NHD->BTD", encoded)


def fused_attention(query: jax.Array, key: jax.Array, value: jax.Array, mask: jax.Array,
                    positions: jax.Array, *, window: int | None = None,
                    implementation: str = "xla") -> jax.Array:
    """gemma's masked softmax attention as one ``jax.nn.dot_product_attention`` call.

    Arguments as ``block_sparse_attention`` (no soft-cap: the fused kernels have none). ``xla``:
    the mask (causal, same example) and gemma's sliding window on ``positions`` as one boolean
    mask — every score is computed, as gemma does (the CPU test path). ``cudnn`` (NVIDIA GPUs,
    bf16/f16): flash attention; causality and the window (``window − 1`` keys back, which inside
    one packed example is gemma's rule on positions) go to the kernel, which skips the blocks they
    exclude, and the example boundaries ride along as the boolean mask (cuDNN adds it as a bias).
    f32 inputs, which cuDNN refuses, take the ``xla`` path. Returns ``[B, T, N, H]``.
    """
    mask = mask.astype(jnp.bool_)
    if implementation == "cudnn" and query.dtype in (jnp.bfloat16, jnp.float16):
        return jax.nn.dot_product_attention(
            query, key, value, mask=mask[:, None], scale=1.0, is_causal=True,
            local_window_size=None if window is None else (window - 1, 0), implementation="cudnn")
    if window is not None:
        mask = mask & _modules.create_sliding_mask(positions, sliding_window_size=window)
    return jax.nn.dot_product_attention(query, key, value, mask=mask[:, None], scale=1.0,
                                        implementation="xla")


def _scores_to_values(q, k, v, mask, soft_cap):
    """q ``[..., t, K, G, H]``, k/v ``[..., s, K, H]``, mask ``[..., t, s]`` → ``[..., t, K, G, H]``."""
    logits = jnp.einsum("...tkgh,...skh->...tkgs", q, k)
    if soft_cap is not None:
        logits = jnp.tanh(logits / soft_cap) * soft_cap
    logits = jnp.where(mask[..., :, None, None, :], logits, _modules.K_MASK)
    probs = jax.nn.softmax(logits, axis=-1).astype(k.dtype)
    return jnp.einsum("...tkgs,...skh->...tkgh", probs, v)


def block_sparse_attention(query: jax.Array, key: jax.Array, value: jax.Array, mask: jax.Array,
                           positions: jax.Array, *, window: int | None = None,
                           soft_cap: float | None = None, global_block: int = GLOBAL_BLOCK) -> jax.Array:
    """Masked softmax attention, scoring only the blocks the mask can let through.

    ``query [B, T, N, H]`` (scaled, RoPE applied), ``key``/``value [B, T, K, H]``, ``mask [B, T, T]``
    (causal, same example); ``window``: a sliding-window layer's size (gemma's rule on
    ``positions``: ``|q_pos − k_pos| < window``). Returns ``[B, T, N, H]``.
    """
    b, t, n, h = query.shape
    kv = key.shape[2]
    mask = mask.astype(jnp.bool_)
    q = query.reshape(b, t, kv, n // kv, h)
    if window is not None:
        sliding = _modules.create_sliding_mask(positions, sliding_window_size=window)
        mask = mask & sliding
        if window < t and t % window == 0:
            out = _local(q, key, value, mask, window, soft_cap)
            return out.reshape(b, t, n, h)
    if t > global_block and t % global_block == 0:
        outs = []
        for i in range(t // global_block):
            rows, end = slice(i * global_block, (i + 1) * global_block), (i + 1) * global_block
            outs.append(_scores_to_values(q[:, rows], key[:, :end], value[:, :end], mask[:, rows, :end],
                                          soft_cap))
        return jnp.concatenate(outs, axis=1).reshape(b, t, n, h)
    return _scores_to_values(q, key, value, mask, soft_cap).reshape(b, t, n, h)


def _local(q, key, value, mask, w, soft_cap):
    """Sliding-window attention in query blocks of ``w``: each sees its own and the previous block's keys."""
    b, t = q.shape[:2]
    nb = t // w

    def with_previous(x):  # [B, T, ...] → [B, nb, 2w, ...]: block i-1 then block i (zeros before 0)
        blocks = x.reshape(b, nb, w, *x.shape[2:])
        prev = jnp.concatenate([jnp.zeros_like(blocks[:, :1]), blocks[:, :-1]], axis=1)
        return jnp.concatenate([prev, blocks], axis=2)

    rows = jnp.arange(t).reshape(nb, w)
    cols = (jnp.arange(nb)[:, None] - 1) * w + jnp.arange(2 * w)[None, :]  # [nb, 2w]
    block_mask = mask[:, rows[:, :, None], jnp.maximum(cols, 0)[:, None, :]]  # [B, nb, w, 2w]
    block_mask = block_mask & (cols >= 0)[None, :, None, :]
    qb = q.reshape(b, nb, w, *q.shape[2:])
    return _scores_to_values(qb, with_previous(key), with_previous(value), block_mask, soft_cap)
