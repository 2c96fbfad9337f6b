"""Splash attention (JAX's Pallas TPU kernel) for training: the TPU's flash attention.

``splash_attention(query, key, value, mask, window=, soft_cap=, mesh=)`` computes what
``train.attention.block_sparse_attention`` computes — gemma's masked softmax attention, causal, within
one packed example, and for a sliding-window layer ``|q_pos − k_pos| < window`` — in one
kernel that never writes the ``[T, T]`` scores to memory and skips the blocks the mask
excludes (``jax.experimental.pallas.ops.tpu.splash_attention``, the kernel MaxText trains
Gemma with). The kernel's masks are static (causal; local with ``window − 1`` keys back) and
the packed examples ride along as segment ids, read off the step's ``[B, T, T]`` mask: the
first key a query may see is its example's first token, the same for every token of the
example. A query that sees nothing (padding) gets an id of its own (it attends to itself:
padding carries no loss). Gemma's query scaling is already in ``query`` (the kernel scales
nothing) and its logit soft-cap (Gemma 2) is the kernel's ``attn_logits_soft_cap``.

Grouped queries (Gemma 3's one KV head for four query heads) go in as they are: the kernel
reads each KV head for its group. On a mesh of several devices the kernel runs under
``shard_map``: rows split on the batch axes, heads on ``tensor`` when both head counts
divide, replicated otherwise. Off a TPU it runs in Pallas' interpreter (the CPU tests).

``supported(query, key)``: the shapes the kernel takes (sequence and head size multiples of
128, query heads a multiple of the KV heads); the caller falls back to the block-sparse path.

**Where it applies:** the train step's attention on a TPU (``train.attention.default_kind``:
``"splash"`` there), every layer whose shapes ``supported`` takes; sampling (a KV cache) goes
through gemma's own attention. **Off a TPU:** ``train.attention`` computes the same attention
by block-sparse scores (``"blocked"``, the CPU's default) or, on an NVIDIA GPU, cuDNN's fused
attention (``"cudnn"``); so does a TPU layer whose shapes the kernel does not take. Pallas'
interpreter runs this kernel on a CPU for the tests only.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

LANE = 128
"""The kernel's sequence and head-size granule (a TPU vector lane)."""
BLOCK = 512
"""Query and key block of the kernel's tiles (forward and the fused backward), at most the length."""


def supported(query: Any, key: Any) -> bool:
    """Whether ``query [B, T, N, H]`` / ``key [B, T, K, H]`` fit the kernel."""
    _, t, n, h = query.shape
    kv = key.shape[2]
    return t % LANE == 0 and h % LANE == 0 and n % kv == 0 and key.shape[1] == t


def segment_ids(mask: jax.Array) -> jax.Array:
    """``[B, T]`` ids from the step's ``[B, T, T]`` mask (causal, same example): each token's
    example start; a row that sees nothing gets ``T + i`` (its own id)."""
    t = mask.shape[-1]
    mask = mask.astype(jnp.bool_)
    first = jnp.argmax(mask, axis=-1).astype(jnp.int32)
    return jnp.where(jnp.any(mask, axis=-1), first, t + jnp.arange(t, dtype=jnp.int32))


@functools.cache
def _kernel(length: int, heads: int, window: int | None, soft_cap: float | None, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    if window is None:
        one = sm.CausalMask((length, length))
    else:  # gemma: |q − k| < window, and causal
        one = sm.LocalMask((length, length), window_size=(window - 1, 0), offset=0)
    b = min(BLOCK, length)
    blocks = sk.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b, block_kv_dkv=b,
                           block_kv_dkv_compute=b, use_fused_bwd_kernel=True)
    with jax.ensure_compile_time_eval():  # its mask tables are constants, made once (not in a trace)
        return sk.make_splash_mha(mask=sm.MultiHeadMask([one] * heads), block_sizes=blocks, head_shards=1,
                                  q_seq_shards=1, attn_logits_soft_cap=soft_cap, interpret=interpret)


def on_tpu(mesh: Any) -> bool:
    """Whether ``mesh``'s devices (default JAX's) are TPUs: else Pallas' interpreter."""
    device = mesh.devices.flat[0] if mesh is not None else jax.devices()[0]
    return device.platform == "tpu"


def splash_attention(query: jax.Array, key: jax.Array, value: jax.Array, mask: jax.Array, *,
                     window: int | None = None, soft_cap: float | None = None, mesh: Any = None) -> jax.Array:
    """gemma's attention by the splash kernel. ``query [B, T, N, H]`` (scaled, RoPE applied),
    ``key``/``value [B, T, K, H]``, ``mask [B, T, T]``; returns ``[B, T, N, H]``."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    seg = segment_ids(mask)
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in (query, key, value))  # [B, heads, T, H]
    n, kv, t = q.shape[1], k.shape[1], q.shape[2]
    interpret = not on_tpu(mesh)
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True)) if mesh is not None else {}
    tensor = sizes.get("tensor", 1)
    head_axis = "tensor" if tensor > 1 and n % tensor == 0 and kv % tensor == 0 else None
    local_heads = n // tensor if head_axis else n

    def run(q, k, v, seg):
        kernel = _kernel(t, local_heads, window, soft_cap, interpret)
        return jax.vmap(kernel)(q, k, v, sk.SegmentIds(q=seg, kv=seg))

    if mesh is not None and mesh.devices.size > 1:
        rows = tuple(a for a in ("data", "fsdp") if sizes.get(a, 1) > 1)
        split = 1
        for a in rows:
            split *= sizes[a]
        rows = rows if rows and q.shape[0] % split == 0 else None
        heads_spec, seg_spec = P(rows, head_axis, None, None), P(rows, None)
        run = jax.shard_map(run, mesh=mesh, in_specs=(heads_spec, heads_spec, heads_spec, seg_spec),
                        out_specs=heads_spec, check_vma=False)
    return jnp.swapaxes(run(q, k, v, seg), 1, 2)
