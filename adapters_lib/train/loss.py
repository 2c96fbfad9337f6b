"""The causal-LM loss for gemma models: attention mask, chunked cross-entropy.

Pure functions of their inputs (no params are created here):
- ``attention_mask(segment_ids)``: causal and within one packed example; padding
  (segment 0) attends to nothing.
- ``chunked_ce_sum(hidden, table, targets, loss_mask, ...)``: Σ CE·mask computed from the
  final hidden states and the embedding table, one sequence chunk at a time, so the
  ``[B, L, V]`` logits never exist at once (forward or backward: each chunk is
  rematerialised in the backward pass). Applies gemma's ``final_logit_softcap`` when set.
  ``kernel="splash"``: the same sums by the Pallas splash attention kernel, no logits in
  memory at all (``ce_splash``; TPU, opt-in), where eligible.
- ``full_ce_sum(logits, targets, loss_mask)``: the same from materialised logits (reference).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import CustomVJPPrimal, SymbolicZero

from adapters_lib.kernels import ce_splash
from adapters_lib.memory.estimate import CE_CHUNK_BYTES
from adapters_lib.models.quantize import qarray

log = logging.getLogger(__name__)

CE_KERNELS = ("xla", "splash", "flash")
"""How ``chunked_ce_sum`` computes: XLA's chunked matmuls (``_ce_scan``), or a Pallas kernel
with no logits in memory (``ce_splash.KERNELS``: JAX's splash kernel, the project's own)."""


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




def ce_split_vocab(device: Any = None) -> int:
    """Vocabulary blocks for the cross-entropy's ``∂hidden`` matmul: 64 on a CPU, 1 elsewhere."""
    return 64 if device is None or getattr(device, "platform", "cpu") == "cpu" else 1


def chunk_length(seq_len: int, rows_per_device: int, vocab_per_device: int,
                 budget_bytes: int = CE_CHUNK_BYTES) -> int:
    """The longest divisor of ``seq_len`` whose f32 logits chunk per device fits the budget."""
    best = 1
    for c in range(1, seq_len + 1):
        if seq_len % c == 0 and rows_per_device * c * vocab_per_device * 4 <= budget_bytes:
            best = c
    return best


# --------------------------------------------------------------------------- loss positions

SLOT_BUCKETS = 8
"""The gathered loss positions per row are rounded up to a multiple of ``length / SLOT_BUCKETS``:
at most this many compiled programs per step shape (``loss_slots``)."""


def loss_slots(loss_mask: Any, buckets: int = SLOT_BUCKETS) -> int:
    """Positions per row to keep for the loss: the most loss-bearing positions of any row of
    ``loss_mask`` (host ``[B, L]``), rounded up to a multiple of ``ceil(L / buckets)``, at most L.

    The step is compiled once per value, so the rounding bounds the recompiles to ``buckets``
    per batch shape; a packed corpus keeps a steady fraction of loss tokens and stays on one or
    two. ``L`` means no gathering.
    """
    mask = np.asarray(loss_mask)
    length = mask.shape[-1]
    granule = max(1, -(-length // buckets))
    most = int(np.count_nonzero(mask, axis=-1).max()) if mask.size else 0
    return min(length, max(granule, -(-most // granule) * granule))


def gather_loss_positions(hidden: jax.Array, targets: jax.Array, loss_mask: jax.Array,
                          slots: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The first ``slots`` loss-bearing positions of each row: ``[B, slots, D]``, ``[B, slots]`` ×2.

    Rows with fewer fill the rest with position 0 at weight 0. ``slots`` must be at least every
    row's count (``loss_slots``); a position dropped would change the loss, so the step only
    passes a bound computed from the same mask. The gather's backward scatters into ``[B, L, D]``.
    """
    keep = loss_mask != 0
    idx = jax.vmap(lambda row: jnp.nonzero(row, size=slots, fill_value=0)[0])(keep)
    filled = jnp.arange(slots)[None, :] < jnp.sum(keep, axis=-1, keepdims=True)
    h = jnp.take_along_axis(hidden, idx[..., None], axis=1)
    t = jnp.take_along_axis(targets, idx, axis=1)
    m = jnp.where(filled, jnp.take_along_axis(loss_mask, idx, axis=1), 0).astype(loss_mask.dtype)
    return h, t, m


# --------------------------------------------------------------------------- chunked cross-entropy


def chunked_ce_sum(hidden: jax.Array, table: jax.Array, targets: jax.Array, loss_mask: jax.Array,
                   *, chunk: int, softcap: float | None = None, split_vocab: int = 1,
                   kernel: str = "xla", mesh: Any = None) -> jax.Array:
    """Σ CE·mask with logits = softcap(hidden · tableᵀ), ``chunk`` positions at a time.

    ``hidden`` [B, L, D] (compute dtype), ``table`` [V, D] (a float array, or a quantized one,
    ``[model] quantize``: read a block of rows at a time, ``models.quantize.qarray``, and never trained);
    logits accumulate in f32 and the
    ``[B, L, V]`` logits never exist at once. Under differentiation the gradient is computed in
    the same pass as the loss (``_fused_ce``): two vocabulary matmuls per position (logits,
    ``∂hidden``), plus ``∂table`` only when the table is trained, and no recompute.
    ``split_vocab``: contract ``∂hidden``'s vocabulary in that many blocks (``ce_split_vocab``).
    ``kernel``: ``CE_KERNELS``; ``"splash"`` computes the loss and ``∂hidden`` in one call of
    the splash attention kernel (``ce_splash``: no ``[N, V]`` array in memory), with the table
    frozen; where it is not eligible (soft-cap, quantized table, shapes, a vocabulary split over
    ``tensor``; a trained table) the XLA path. ``mesh``: the step's (the kernel runs per device).
    """
    length = hidden.shape[1]
    if length % chunk:
        raise ValueError(f"chunk {chunk} does not divide sequence length {length}")
    if kernel not in CE_KERNELS:
        raise ValueError(f"cross-entropy kernel {kernel!r}: expected one of {CE_KERNELS}")
    splash = None
    if kernel in ce_splash.KERNELS:
        why = ce_splash.why_not(hidden, table, softcap, mesh, kernel)
        if why is None:
            splash = _KernelCE(mesh, kernel)
        else:
            log.debug("cross-entropy: the %s kernel does not apply (%s); XLA's chunked path", kernel, why)
    return _fused_ce(hidden, table, targets, loss_mask, chunk, softcap, split_vocab, splash)


@dataclasses.dataclass(frozen=True)
class _KernelCE:
    """``_fused_ce``'s static argument: compute by ``kernel`` (``ce_splash.KERNELS``) on
    ``mesh``'s devices."""

    mesh: Any
    kernel: str = "splash"


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
    """[B, L, ...] → [n, B, chunk, ...]; the batch dim keeps its sharding."""
    b, length = x.shape[:2]
    return jnp.moveaxis(x.reshape(b, length // chunk, chunk, *x.shape[2:]), 1, 0)


def _unchunk(x: jax.Array) -> jax.Array:
    n, b, c = x.shape[:3]
    return jnp.moveaxis(x, 0, 1).reshape(b, n * c, *x.shape[3:])


def _ce_scan(hidden, table, targets, mask, chunk, softcap, *, want_hidden=False, want_table=False,
             split_vocab=1):
    """(Σ CE·mask, ∂/∂hidden or None, ∂/∂table or None), one chunk of positions at a time.

    The gradients are those of the sum (cotangent 1): per chunk ``g = (softmax − onehot)·mask``
    (times the soft-cap's derivative), cast to the compute dtype before its matmuls — an f32
    ``g`` times a bf16 table would run as an f32 (TF32 on a GPU) matmul over the vocabulary,
    41 of 149 ms of a Gemma-3-1B LoRA step on an H200 (bench/results/gpu-h200-profile.log).
    """
    dt = hidden.dtype
    tab = table.astype(dt)  # a quantized table: its dequantized dtype (read block by block)
    grads = want_hidden or want_table
    if want_table and qarray.is_qarray(table):
        raise ValueError("a quantized embedding table is frozen: it has no gradient")

    def one(h, t, m):
        with jax.named_scope("ce_chunk"):
            logits = _softcap(qarray.vocab_logits(h, tab), softcap)
            lse = jax.nn.logsumexp(logits, axis=-1)
            target_logit = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]  # no pass over V
            m = m.astype(jnp.float32)
            ce = jnp.sum((lse - target_logit) * m)
            if not grads:
                return ce, None, None
            # softmax·mask in one pass over the logits; the target's −1 is a scatter of B·chunk values
            g = jnp.exp(logits - lse[..., None]) * m[..., None]
            at_target = (jnp.exp(target_logit - lse) - 1.0) * m
            if softcap is not None:
                g = g * (1.0 - jnp.square(logits / softcap))
                at_target = at_target * (1.0 - jnp.square(target_logit / softcap))
            g = jnp.put_along_axis(g.astype(dt), t[..., None], at_target[..., None].astype(dt), axis=-1,
                                   inplace=False)
            dh = qarray.vocab_times(g, tab, split=split_vocab).astype(dt) if want_hidden else None
            dtab = jnp.einsum("blv,bld->vd", g, h, preferred_element_type=jnp.float32) if want_table else None
            return ce, dh, dtab

    if hidden.shape[1] == chunk:
        ce, dh, dtab = one(hidden, targets, mask)
    else:
        def body(carry, xs):
            total, acc = carry
            ce, dh, dtab = one(*xs)
            return (total + ce, None if acc is None else acc + dtab), dh

        acc0 = jnp.zeros(table.shape, jnp.float32) if want_table else None
        (ce, dtab), dh = jax.lax.scan(body, (jnp.zeros((), jnp.float32), acc0),
                                      (_chunks(hidden, chunk), _chunks(targets, chunk), _chunks(mask, chunk)))
        dh = None if dh is None else _unchunk(dh)
    return ce, dh, (None if dtab is None else dtab.astype(table.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _fused_ce(hidden, table, targets, mask, chunk, softcap, split_vocab, splash):
    if splash is not None:
        return ce_splash.parts(hidden, table, targets, mask, splash.mesh, splash.kernel)[0]
    return _ce_scan(hidden, table, targets, mask, chunk, softcap)[0]


def _primal(x: Any) -> tuple[Any, bool]:
    """(value, perturbed) of a custom-VJP argument: one array, or a pytree of them (a quantized
    table: each of its arrays comes wrapped)."""
    if isinstance(x, CustomVJPPrimal):
        return x.value, x.perturbed
    wrapped = jax.tree.leaves(x, is_leaf=lambda p: isinstance(p, CustomVJPPrimal))
    value = jax.tree.map(lambda p: p.value, x, is_leaf=lambda p: isinstance(p, CustomVJPPrimal))
    return value, any(p.perturbed for p in wrapped)


def _fused_ce_fwd(hidden, table, targets, mask, chunk, softcap, split_vocab, splash):
    (table, table_perturbed), (hidden, hidden_perturbed) = _primal(table), _primal(hidden)
    if splash is not None and not table_perturbed:  # the kernel gives no ∂table
        ce, dh = ce_splash.parts(hidden, table, targets.value, mask.value, splash.mesh, splash.kernel)
        return ce, (dh if hidden_perturbed else None, None)
    if splash is not None:
        log.debug("cross-entropy: the table is trained; XLA's chunked path (the kernel gives no ∂table)")
    ce, dh, dtab = _ce_scan(hidden, table, targets.value, mask.value, chunk, softcap,
                            want_hidden=hidden_perturbed, want_table=table_perturbed, split_vocab=split_vocab)
    return ce, (dh, dtab)


def _fused_ce_bwd(chunk, softcap, split_vocab, splash, res, ct):
    del chunk, softcap, split_vocab, splash
    dh, dtab = res
    if isinstance(ct, SymbolicZero):
        return None, None, None, None
    d_hidden = None if dh is None else dh * ct.astype(dh.dtype)
    d_table = None if dtab is None else dtab * ct.astype(dtab.dtype)
    return d_hidden, d_table, None, None


_fused_ce.defvjp(_fused_ce_fwd, _fused_ce_bwd, symbolic_zeros=True)
