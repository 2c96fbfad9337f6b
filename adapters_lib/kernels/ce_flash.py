"""The cross-entropy's ``lse`` and ``Σ softmax·T`` by the project's own Pallas TPU kernel.

For hidden rows ``h [N, D]`` and the embedding table ``T [V, D]`` (no soft-cap), one kernel
call gives, per row, ``lse = log Σ_v exp(h·T_v)`` and ``o = Σ_v softmax(h·Tᵀ)_v T_v`` (f32):
the cross-entropy is ``lse − h·T[target]`` and its ∂hidden is ``o − T[target]`` (``ce_splash``
does that arithmetic and the sharding; this module is the kernel). It is flash attention's
forward with one head and no mask — the splash kernel computes the same (``kernel="splash"``)
— written for this use:

- the table tile is read **once** per (row block, vocabulary block) and serves as both the
  keys (``h·Tᵀ``) and the values (``p·T``); the splash kernel reads ``k`` and ``v`` as two
  arrays, so the table twice;
- ``p·T`` is a bf16 × bf16 matmul with an f32 accumulator, like the scores: this jax's splash
  kernel casts each value tile to f32 first (``v.astype(float32)``), and an f32 matmul is
  several passes of the MXU;
- large blocks (``blocks``: 1024 rows × 1024 vocabulary first) with the kernel's own VMEM
  limit (``vmem_limit``) instead of XLA's 16 MiB scoped default: the table is streamed once
  per row block, and the f32 accumulator rescaled once per vocabulary block.

Measured on a v5e at the Gemma-3-1B step's shape (8192 rows, V 262,144, D 1152, bf16;
``tpu_device.sh check ce``; BENCHMARKS.md, "TPU v5e"): 52.8 ms at 1024 × 1024 (187 TFLOP/s, 95 %
of the chip's peak), 52.9 at 2048 × 512, 53.6 at 512 × 1024, 55.5 at 512 × 512, 60.2 at
2048 × 256, 62.5 at 1024 × 2048; JAX's splash kernel 54.5, XLA's chunked path 106.0.

**Where it applies:** the TPU's default cross-entropy kernel (``"flash"``:
``train.step._ce_kernel``), through ``ce_splash.parts``, when ``ce_splash.why_not_run`` finds
nothing against it (no soft-cap, a float table not trained, dims and rows multiples of 128, the
vocabulary not split over ``tensor``). **Off a TPU,** and where it does not apply, the step
takes XLA's chunked path (``train.loss.chunked_ce_sum``: the logits a chunk at a time); Pallas'
interpreter runs this kernel on a CPU for the tests only.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

LANES = 128
ROW_BLOCKS = (1024, 2048, 512, 256, 128)
VOCAB_BLOCKS = (1024, 512, 256, 128)
VMEM_BUDGET = 64 * 2**20
"""Bytes of VMEM the tiles may take (a v5e core has 128 MiB; XLA's scoped default is 16 MiB,
raised for this kernel by its ``vmem_limit_bytes``)."""
NT = (((1,), (1,)), ((), ()))  # h · Tᵀ: contract both on D


def vmem_bytes(bq: int, bv: int, dim: int, itemsize: int) -> int:
    """The kernel's VMEM for a ``bq × bv`` tile, roughly: the row and table tiles and the f32
    output double-buffered, the f32 accumulator, the (m, l) stats and lse, the f32 score tile
    and its exp (and a bf16 copy)."""
    inputs = 2 * (bq + bv) * dim * itemsize
    outputs = 2 * (bq * dim * 4 + bq * LANES * 4)
    scratch = bq * dim * 4 + 2 * bq * LANES * 4
    scores = bq * bv * (4 + 4 + itemsize)
    return inputs + outputs + scratch + scores


def vmem_limit(bq: int, bv: int, dim: int, itemsize: int) -> int:
    """The kernel's ``vmem_limit_bytes``: its tiles with room for Mosaic's own temporaries."""
    return min(100 * 2**20, max(32 * 2**20, int(vmem_bytes(bq, bv, dim, itemsize) * 1.5)))


def first_fit(n: int, vocab: int, row_blocks, vocab_blocks, fits) -> tuple[int, int] | None:
    """The first (row block, vocabulary block), in the order given, that divides ``n`` and
    ``vocab`` and ``fits(rows, vocab_block)``; None when none does."""
    for bq in row_blocks:
        if n % bq:
            continue
        for bv in vocab_blocks:
            if vocab % bv == 0 and fits(bq, bv):
                return bq, bv
    return None


def blocks(n: int, vocab: int, dim: int, itemsize: int) -> tuple[int, int] | None:
    """(row block, vocabulary block) for ``n`` rows, or None when none fits the VMEM budget:
    ``ROW_BLOCKS`` in order (1024 first: the fastest on a v5e; larger row blocks read the
    table fewer times), then the largest vocabulary block."""
    return first_fit(n, vocab, ROW_BLOCKS, VOCAB_BLOCKS,
                     lambda bq, bv: vmem_bytes(bq, bv, dim, itemsize) <= VMEM_BUDGET)


def _kernel(h_ref, t_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref):
    from jax.experimental import pallas as pl

    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    t = t_ref[...]                                                    # [bv, D]: keys and values
    s = lax.dot_general(h_ref[...], t, NT, preferred_element_type=jnp.float32)  # [bq, bv]
    m_prev = m_ref[...]                                               # [bq, LANES], lanes equal
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
    p = jnp.exp(s - m_next[:, :1])
    alpha = jnp.exp(m_prev - m_next)
    l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
    m_ref[...] = m_next
    acc_ref[...] = alpha[:, :1] * acc_ref[...] + lax.dot(p.astype(t.dtype), t,
                                                         preferred_element_type=jnp.float32)

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        total = l_ref[...]
        o_ref[...] = acc_ref[...] / total[:, :1]
        lse_ref[...] = m_ref[...] + jnp.log(total)


@functools.cache
def _call(n: int, vocab: int, dim: int, dtype: str, bq: int, bv: int, interpret: bool):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    itemsize = jnp.dtype(dtype).itemsize
    return pl.pallas_call(
        _kernel,
        grid=(n // bq, vocab // bv),
        in_specs=[pl.BlockSpec((bq, dim), lambda i, j: (i, 0)),
                  pl.BlockSpec((bv, dim), lambda i, j: (j, 0))],
        out_specs=[pl.BlockSpec((bq, dim), lambda i, j: (i, 0)),
                   pl.BlockSpec((bq, LANES), lambda i, j: (i, 0))],
        out_shape=[jax.ShapeDtypeStruct((n, dim), jnp.float32),
                   jax.ShapeDtypeStruct((n, LANES), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((bq, LANES), jnp.float32), pltpu.VMEM((bq, LANES), jnp.float32),
                        pltpu.VMEM((bq, dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                             vmem_limit_bytes=vmem_limit(bq, bv, dim, itemsize)),
        interpret=interpret,
        name="ce_flash",
    )


def softmax_mean(h: jax.Array, table: jax.Array, *, interpret: bool,
                 sizes: tuple[int, int] | None = None) -> tuple[jax.Array, jax.Array]:
    """``(o [N, D] f32, lse [N] f32)`` for ``h [N, D]`` and ``table [V, D]`` of one dtype:
    ``o_i = Σ_v softmax(h_i·Tᵀ)_v T_v``, ``lse_i = log Σ_v exp(h_i·T_v)``. ``sizes``: the
    (row, vocabulary) blocks; default ``blocks`` (which must not be None)."""
    n, dim = h.shape
    vocab = table.shape[0]
    bq, bv = sizes or blocks(n, vocab, dim, jnp.dtype(h.dtype).itemsize)
    o, lse = _call(n, vocab, dim, jnp.dtype(h.dtype).name, bq, bv, interpret)(h, table.astype(h.dtype))
    return o, lse[:, 0]
