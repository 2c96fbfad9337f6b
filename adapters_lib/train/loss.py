"""The causal-LM loss for gemma models: attention mask, chunked cross-entropy.

Pure functions of their inputs (no params are created here):
- ``attention_mask(segment_ids)``: causal and within one packed example; padding
  (segment 0) attends to nothing.
- ``chunked_ce_sum(hidden, table, targets, loss_mask, ...)``: Σ CE·mask computed from the
  final hidden states and the embedding table, one sequence chunk at a time, so the
  ``[B, L, V]`` logits never exist at once (forward or backward: each chunk is
  rematerialised in the backward pass). Applies gemma's ``final_logit_softcap`` when set.
- ``full_ce_sum(logits, targets, loss_mask)``: the same from materialised logits (reference).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from adapters_lib.memory import CE_CHUNK_BYTES


def attention_mask(segment_ids: jax.Array) -> jax.Array:
    """``mask[b,i,j] = seg[b,i]==seg[b,j] & seg[b,i]!=0 & j<=i`` (bool ``[B, L, L]``)."""
    seg = segment_ids
    length = seg.shape[-1]
    causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))
    same = (seg[..., :, None] == seg[..., None, :]) & (seg[..., :, None] != 0)
    return same & causal


def _softcap(logits: jax.Array, cap: float | None) -> jax.Array:
    if cap is None:
        return logits
    return jnp.tanh(logits / cap) * cap


def _ce_terms(logits: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Σ (logsumexp − logit[target]) · mask over every axis."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    target_logit = jnp.sum(jnp.where(vocab == targets[..., None], logits, 0.0), axis=-1)
    return jnp.sum((lse - target_logit) * mask.astype(jnp.float32))


def full_ce_sum(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """Σ CE·mask from materialised logits (f32 math)."""
    return _ce_terms(logits.astype(jnp.float32), targets, loss_mask)




def ce_chunk_budget(device: Any = None) -> int:
    """Bytes of f32 logits per cross-entropy chunk on ``device``.

    128 MiB on a CPU; on an accelerator 1/64 of its memory, at least 128 MiB. Every chunk
    reads the whole ``[V, D]`` embedding table (forward, recompute, backward), so narrow
    chunks on a GPU are bound by that read, not by the matmul (BENCHMARKS.md, GPU MFU).
    """
    if device is None or getattr(device, "platform", "cpu") == "cpu":
        return CE_CHUNK_BYTES
    try:
        limit = int((device.memory_stats() or {}).get("bytes_limit", 0))
    except Exception:  # noqa: BLE001 - a backend without memory stats keeps the CPU budget
        limit = 0
    return max(CE_CHUNK_BYTES, limit // 64)


def chunk_length(seq_len: int, rows_per_device: int, vocab_per_device: int,
                 budget_bytes: int = CE_CHUNK_BYTES) -> int:
    """The longest divisor of ``seq_len`` whose f32 logits chunk per device fits the budget."""
    best = 1
    for c in range(1, seq_len + 1):
        if seq_len % c == 0 and rows_per_device * c * vocab_per_device * 4 <= budget_bytes:
            best = c
    return best


@jax.custom_vjp
def chunk_logits(hidden: jax.Array, table: jax.Array) -> jax.Array:
    """``hidden · tableᵀ`` accumulated and returned in f32 (``[B, L, D] × [V, D] → [B, L, V]``).

    The backward casts the f32 cotangent to the compute dtype before its two matmuls.
    Autodiff would multiply the f32 cotangent by the bf16 table, which XLA runs as an f32
    (TF32) matmul over the whole vocabulary: on an H200 that one product took 41 of 149 ms
    of a Gemma-3-1B LoRA step (BENCHMARKS.md). With f32 compute nothing changes.
    """
    return _logits(hidden, table)


def _logits(hidden, table):
    return jnp.einsum("bld,vd->blv", hidden, table, preferred_element_type=jnp.float32)


def _chunk_logits_fwd(hidden, table):
    return _logits(hidden, table), (hidden, table)


def _chunk_logits_bwd(res, g):
    hidden, table = res
    g = g.astype(hidden.dtype)
    d_hidden = jnp.einsum("blv,vd->bld", g, table, preferred_element_type=jnp.float32)
    d_table = jnp.einsum("blv,bld->vd", g, hidden, preferred_element_type=jnp.float32)
    return d_hidden.astype(hidden.dtype), d_table.astype(table.dtype)


chunk_logits.defvjp(_chunk_logits_fwd, _chunk_logits_bwd)


def chunked_ce_sum(hidden: jax.Array, table: jax.Array, targets: jax.Array, loss_mask: jax.Array,
                   *, chunk: int, softcap: float | None = None) -> jax.Array:
    """Σ CE·mask with logits = softcap(hidden · tableᵀ), ``chunk`` positions at a time.

    ``hidden`` [B, L, D] (compute dtype), ``table`` [V, D]; logits accumulate in f32.
    """
    b, length, d = hidden.shape
    if length % chunk:
        raise ValueError(f"chunk {chunk} does not divide sequence length {length}")

    def one(h, t, m):
        with jax.named_scope("ce_chunk"):
            return _one(h, t, m)

    def _one(h, t, m):
        logits = chunk_logits(h, table.astype(h.dtype))
        return _ce_terms(_softcap(logits, softcap), t, m)

    n = length // chunk
    if n == 1:
        return one(hidden, targets, loss_mask)
    one = jax.checkpoint(one)  # the backward recomputes each chunk's logits

    def split(x):  # [B, L, ...] → [n, B, chunk, ...]; the batch dim keeps its sharding
        return jnp.moveaxis(x.reshape(b, n, chunk, *x.shape[2:]), 1, 0)

    def body(total, xs):
        return total + one(*xs), None

    total, _ = jax.lax.scan(body, jnp.zeros((), jnp.float32),
                            (split(hidden), split(targets), split(loss_mask)))
    return total
