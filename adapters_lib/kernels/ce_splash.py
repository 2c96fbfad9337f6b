"""The cross-entropy and its ∂hidden by a Pallas attention kernel: no logits in HBM.

With no final-logit soft-cap (Gemma 3/4), for hidden ``h_i`` and the embedding table ``T [V, D]``:
``p = softmax(h_i·Tᵀ)``, ``CE_i = lse_i − h_i·T[t_i]`` and ``∂CE_i/∂h_i = Σ_v p_v T_v − T[t_i]``.
That is single-head attention with ``q = h`` (unscaled: the kernel scales nothing), ``k = v = T``
and a full mask: the kernel's output is ``o_i = Σ_v p_v T_v`` and the residual it saves
(``save_residuals=True``) is ``lse_i`` (this jax's splash forward writes ``log(l) + m`` per
query row, f32). So ``Σ m_i CE_i`` and ``∂hidden_i = m_i (o_i − T[t_i])`` come from one kernel
call that reads the table block by block and never writes an ``[N, V]`` array
(``jax.experimental.pallas.ops.tpu.splash_attention``; ``attention_splash`` uses it for
attention). ``loss._fused_ce`` calls ``parts`` in its forward; the backward only scales.

Eligibility (``why_not``; else ``loss``'s chunked XLA path): no soft-cap, a plain float table
(not quantized), the table not trained (checked in ``loss._fused_ce``'s forward), the head dim
a multiple of 128, the vocabulary a multiple of 128 and the rows × positions per device a
multiple of 128. On a mesh of several devices the kernel runs under ``shard_map``, rows split
on the batch axes, the table replicated; a vocabulary split over ``tensor`` is not eligible.
Off a TPU the kernel runs in Pallas' interpreter (slow: tests only).

**Where it applies:** on a TPU, the cross-entropy of every train step that ``why_not_run``
accepts (``train.step._ce_kernel`` picks ``"flash"`` there; ``"splash"`` when a caller asks,
``build_steps(ce_kernel=)``), called by ``train.loss``'s fused path. **Off a TPU** (the step's default is ``"xla"``: the interpreter is
slow) and wherever ``why_not``/``why_not_run`` say no (Gemma 2's soft-cap, a quantized or
trained table, shapes off the 128 lanes, a vocabulary split over ``tensor``), ``train.loss``
computes the same loss by XLA's chunked path (``chunked_ce_sum``).

Block sizes (``blocks``): the query block (rows of ``h``) as large as divides ``N`` and fits
the VMEM budget — the table is streamed once per query block (twice: ``k`` and ``v`` are the
same array read separately), so a larger query block reads it fewer times; the vocabulary block
512 (or 256, 128) where it divides ``V``. A v5e: 1024 × 512 at D 640, 512 × 512 at D 1152,
256 × 256 at D 2560 (``vmem_bytes``).

Two kernels (``KERNELS``): JAX's splash kernel (``"splash"``, its blocks from ``blocks``) and
the project's own (``"flash"``, ``ce_flash``: the table read once a tile, a bf16 ``p·T``), the
TPU's default (``step._ce_kernel``). Measured on a v5e (BENCHMARKS.md, "TPU v5e"): the
cross-entropy and ∂hidden of the Gemma-3-1B step alone, 52.8 ms (flash), 54.5 (splash), 106.0
(XLA's chunked path); the step with splash 0.3720 s against XLA's 0.4035, the same loss.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from adapters_lib import mesh as mesh_lib
from adapters_lib.kernels import attention_splash, ce_flash
from adapters_lib.memory import estimate as memory

log = logging.getLogger(__name__)

LANE = memory.KERNEL_CE_LANE
Q_BLOCKS = (1024, 512, 256, 128)
KV_BLOCKS = (512, 256, 128)
VMEM_BUDGET = 15 * 2**20
"""Bytes of VMEM the kernel's tiles may take: XLA:TPU's scoped VMEM limit on a v5e is 16 MiB
and the kernel sets none of its own."""


def vmem_bytes(bq: int, bkv: int, dim: int, itemsize: int) -> int:
    """The kernel's scoped VMEM, roughly: q, k, v and out tiles double-buffered, the f32 output
    accumulator, the (m, l) stats and the f32 score tile. Held against v5e compiles (deviceless,
    V = 262144, bf16): D 1152 at (512, 512) and (512, 256), D 2560 at (256, 256) and (128, 512),
    D 640 at (1024, 512) fit; D 1152 at (1024, 512) (XLA: 18.26 MiB), (512, 1024), D 2560 at
    (512, 512), (256, 512), D 640 at (1024, 1024), (2048, 256) do not — this estimate puts every
    one on the right side of ``VMEM_BUDGET``."""
    tiles = 2 * (2 * bq * dim + 2 * bkv * dim) * itemsize
    return tiles + bq * dim * 4 + 2 * bq * LANE * 4 + bq * bkv * 4


def blocks(n: int, vocab: int, dim: int, itemsize: int) -> tuple[int, int] | None:
    """(query block, vocabulary block) for ``n`` query rows, or None when none fits: the largest
    query block first (the table is read once per query block), then the largest vocabulary
    block (fewer grid steps)."""
    return ce_flash.first_fit(n, vocab, Q_BLOCKS, KV_BLOCKS,
                              lambda bq, bkv: vmem_bytes(bq, bkv, dim, itemsize) <= VMEM_BUDGET)


def mesh_rows(mesh: Any) -> tuple[tuple[str, ...], int, int]:
    """(the batch axes of ``mesh`` of size > 1, their product, the ``tensor`` size)."""
    if mesh is None:
        return (), 1, 1
    sizes = mesh_lib.mesh_sizes(mesh)
    rows = tuple(a for a in mesh_lib.BATCH_AXES if sizes.get(a, 1) > 1)
    return rows, math.prod(sizes[a] for a in rows), sizes.get("tensor", 1)


def why_not_run(softcap: float | None, table: Any, dim: int, vocab: int, mesh: Any = None) -> str | None:
    """Why the kernel cannot serve any step of a run (None: it may; each call's rows are
    checked by ``why_not``): what the model and the mesh decide (``memory.kernel_ce_why_not``,
    the estimate's rule too)."""
    from adapters_lib.models.quantize import qarray

    quantized = table is not None and (qarray.is_qarray(table) or not jnp.issubdtype(table.dtype, jnp.floating))
    return memory.kernel_ce_why_not(softcap, dim, vocab, mesh_rows(mesh)[2], quantized)


def why_not(hidden: Any, table: Any, softcap: float | None, mesh: Any = None,
            kernel: str = "splash") -> str | None:
    """Why ``kernel`` (``KERNELS``) cannot compute this cross-entropy (None: it can)."""
    if hidden.ndim != 3:
        return f"hidden of rank {hidden.ndim}"
    b, length, dim = hidden.shape
    vocab = table.shape[0]
    why = why_not_run(softcap, table, dim, vocab, mesh)
    if why:
        return why
    _, split, _ = mesh_rows(mesh)
    if b % split:
        return f"{b} rows do not split over the batch axes ({split} devices)"
    n = b // split * length
    if _blocks_of(kernel)(n, vocab, dim, jnp.dtype(hidden.dtype).itemsize) is None:
        return f"no block size divides {n} rows per device × vocabulary {vocab} (head dim {dim})"
    return None


KERNELS = ("flash", "splash")
"""The kernels that compute the loss and ∂hidden without logits: the project's own
(``ce_flash``: the table read once a tile, a bf16 ``p·T``) and JAX's splash attention kernel."""


def _blocks_of(kernel: str):
    if kernel not in KERNELS:
        raise ValueError(f"cross-entropy kernel {kernel!r}: expected one of {KERNELS}")
    return ce_flash.blocks if kernel == "flash" else blocks


@functools.cache
def _kernel(n: int, vocab: int, bq: int, bkv: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    sizes = sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv)  # forward only
    with jax.ensure_compile_time_eval():  # its mask tables are constants, made once (not in a trace)
        return sk.make_splash_mqa_single_device(mask=sm.MultiHeadMask([sm.FullMask((n, vocab))]),
                                                block_sizes=sizes, save_residuals=True,
                                                interpret=interpret)


def parts(hidden: jax.Array, table: jax.Array, targets: jax.Array, mask: jax.Array,
          mesh: Any = None, kernel: str = "splash") -> tuple[jax.Array, jax.Array]:
    """(Σ CE·mask in f32, its ∂hidden in ``hidden.dtype``) for ``hidden [B, L, D]``,
    ``table [V, D]``, ``targets``/``mask [B, L]`` by ``kernel`` (``KERNELS``; ``why_not``
    must be None)."""
    dt = hidden.dtype
    tab = table.astype(dt)
    vocab, dim = tab.shape
    interpret = not attention_splash.on_tpu(mesh)

    def local(h, tab, t, m):
        b, length, _ = h.shape
        n = b * length
        q = h.reshape(n, dim)
        if kernel == "flash":
            o, lse = ce_flash.softmax_mean(q, tab, interpret=interpret)
        else:
            bq, bkv = blocks(n, vocab, dim, jnp.dtype(dt).itemsize)
            with jax.named_scope("ce_splash"):
                o, (lse,) = _kernel(n, vocab, bq, bkv, interpret)(q[None], tab, tab)
            o, lse = o[0], lse[0]
        at_target = jnp.take(tab, t.reshape(n), axis=0)  # [n, D]: T[t_i], a gather of n rows
        target_logit = jnp.einsum("nd,nd->n", q, at_target, preferred_element_type=jnp.float32)
        w = m.reshape(n).astype(jnp.float32)
        ce = jnp.sum((lse - target_logit) * w)
        dh = ((o.astype(jnp.float32) - at_target.astype(jnp.float32)) * w[:, None]).astype(dt)
        return ce, dh.reshape(b, length, dim)

    rows, split, _ = mesh_rows(mesh)
    if mesh is None or mesh.devices.size == 1:
        return local(hidden, tab, targets, mask)

    def sharded(h, tab, t, m):
        ce, dh = local(h, tab, t, m)
        return (jax.lax.psum(ce, rows) if rows else ce), dh

    row_spec = P(rows or None)
    run = jax.shard_map(sharded, mesh=mesh, in_specs=(row_spec, P(), row_spec, row_spec),
                        out_specs=(P(), row_spec), check_vma=False)
    return run(hidden, tab, targets, mask)
