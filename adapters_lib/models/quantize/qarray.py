"""Quantized leaves and how the model reads them: qwix ``QArray``s, a GGUF block's own form,
and the embedding table read a block of rows at a time.

- ``BlockQArray``: a qwix ``QArray`` with a float ``bias`` per tile (``x = q·scale + bias``)
  and the float dtype it stands for. A QArray's zero point must be an integer of the qvalue's
  type (qwix 0.1.8, ``validate_qarray``); llama.cpp's Q4_K (``x = d·sc·q − dmin·m``) needs a
  float offset, so the GGUF route (``quantize_gguf``) holds such tensors as this subclass.
  Its scales stay float32 (``d·sc`` of an f16 ``d`` and a 6-bit ``sc`` is exact there, not in
  bf16), and ``dtype`` says what a dequantized read gives (the param dtype).
- ``dequantize(x, dtype)``: either kind back to floats (qwix's arithmetic, plus the bias).
- The table ops: ``take_rows`` (a gather of qvalue and scale rows, dequantized: the embedding
  lookup), ``vocab_logits`` (``h · tableᵀ``) and ``vocab_times`` (``g · table``, the
  cross-entropy's ``∂hidden``). A quantized ``[V, D]`` table is dequantized ``table_blocks``
  rows at a time inside a loop, so its float copy never exists whole (a 262,144 × 640 table
  is 671 MB in f32; a block of 4,096 rows is 10 MB). A float table takes the plain path.
"""

from __future__ import annotations

import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp
import qwix


@flax.struct.dataclass
class BlockQArray(qwix.QArray):
    """A QArray with a float offset per tile and the float dtype it stands for (see the
    module doc). ``bias`` has the scale's shape (or is None)."""

    bias: jax.Array | None = None
    float_dtype: Any = flax.struct.field(pytree_node=False, default=None)

    @property
    def dtype(self):  # what a dequantized read gives (qwix's QArray: the scale's dtype)
        return jnp.dtype(self.float_dtype) if self.float_dtype is not None else self.scale.dtype

    def astype(self, dtype: Any) -> BlockQArray:
        return self.replace(float_dtype=jnp.dtype(dtype))


@flax.struct.dataclass
class PackedQArray(BlockQArray):
    """A 4-bit table held as bytes: ``qvalue`` is uint8 ``[..., n/2]``, two values a byte (the
    first in the low nibble, as ``bitcast_convert_type`` lays them), standing for ``nibbles``
    (int4 or uint4) of ``shape`` ``[..., n]``. The device bytes are int4's; what changes is
    that the table's row blocks are sliced from it as they are (``vocab_logits``): an int4
    table had to be copied to bytes inside the step first, XLA:CPU slicing int4 no other way
    (one copy of the table at half a byte a value among the step's temporaries: 80 MiB of the
    real 270M's, 144 MiB of the Gemma-3-1B shape's)."""

    nibbles: Any = flax.struct.field(pytree_node=False, default=None)

    shape = property(lambda self: (*self.qvalue.shape[:-1], self.qvalue.shape[-1] * 2))

    def unpacked(self) -> qwix.QArray:
        q = jax.lax.bitcast_convert_type(self.qvalue, self.nibbles)
        return qwix.QArray(qvalue=q.reshape(self.shape), scale=self.scale, zero_point=self.zero_point,
                           qtype=self.qtype)


def pack(x: Any) -> Any:
    """A 4-bit quantized leaf as a ``PackedQArray`` (its last axis even); others as they are."""
    q = x.qvalue
    if q.dtype not in _NIBBLES or q.shape[-1] % 2 or isinstance(x, PackedQArray):
        return x
    packed = jax.lax.bitcast_convert_type(q.reshape(*q.shape[:-1], q.shape[-1] // 2, 2), jnp.uint8)
    return PackedQArray(qvalue=packed, scale=x.scale, zero_point=x.zero_point, qtype=x.qtype,
                        bias=getattr(x, "bias", None), float_dtype=getattr(x, "float_dtype", None),
                        nibbles=q.dtype)


def is_qarray(x: Any) -> bool:
    return isinstance(x, qwix.QArray)


def leaf_dtype(x: Any) -> Any:
    """The float dtype a params leaf stands for (a quantized leaf: its dequantized dtype)."""
    return x.dtype


def params_dtype(params: Any) -> Any:
    """The float dtype of a params tree: its first float leaf, a quantized leaf counted as
    the dtype it dequantizes to (the sampler's KV cache takes it)."""
    for x in jax.tree.leaves(params, is_leaf=is_qarray):
        if is_qarray(x) or jnp.issubdtype(x.dtype, jnp.floating):
            return leaf_dtype(x)
    return jnp.dtype(jnp.float32)


def dequantize(x: Any, dtype: Any = None) -> jax.Array:
    """A quantized leaf as floats of ``dtype`` (default: the dtype it stands for). An f32
    scale (a GGUF block's) is applied in f32 and only the product is cast."""
    out = jnp.dtype(dtype) if dtype is not None else leaf_dtype(x)
    bias = getattr(x, "bias", None)
    if isinstance(x, PackedQArray):
        x = x.unpacked()
    plain = qwix.QArray(qvalue=x.qvalue, scale=x.scale, zero_point=x.zero_point, qtype=x.qtype)
    y = qwix.dequantize(plain)
    if bias is not None:
        y = _add_per_tile(y, bias.astype(y.dtype))
    return y.astype(out)


def _add_per_tile(y: jax.Array, per_tile: jax.Array) -> jax.Array:
    """``y`` plus one value per tile (``per_tile``'s shape divides ``y``'s, axis by axis)."""
    split, kept = [], []
    for full, tiles in zip(y.shape, per_tile.shape, strict=True):
        split += [tiles, full // tiles]
        kept += [tiles, 1]
    return (y.reshape(split) + per_tile.reshape(kept)).reshape(y.shape)


def _map_leaves(fn, x: Any) -> Any:
    """``fn`` on every array of a QArray (qvalue, scale, zero point, bias), its type kept."""
    return jax.tree.map(fn, x)


def scale_sharding(weight_sharding: Any, shape: tuple[int, ...], axes: dict[int, int]) -> Any:
    """A per-tile array's sharding: on the weight's mesh axes where its dims still divide
    (else replicated on that dim); the weight's own when it is not a ``NamedSharding``."""
    import math

    from jax.sharding import NamedSharding, PartitionSpec

    if not isinstance(weight_sharding, NamedSharding):
        return weight_sharding
    spec = tuple(weight_sharding.spec) + (None,) * (len(shape) - len(weight_sharding.spec))
    sizes = dict(weight_sharding.mesh.shape)
    scale_shape = [shape[a] // axes[a] if a in axes else shape[a] for a in range(len(shape))]
    scale_spec = []
    for dim, axis in zip(scale_shape, spec, strict=True):
        names = (axis,) if isinstance(axis, str) else tuple(axis or ())
        size = math.prod(sizes[a] for a in names) if names else 1
        scale_spec.append(axis if names and dim % size == 0 else None)
    return NamedSharding(weight_sharding.mesh, PartitionSpec(*scale_spec))


# --------------------------------------------------------------------------- the table


def take_rows(table: Any, ids: jax.Array) -> jax.Array:
    """``table[ids]`` as floats: only the gathered rows are dequantized (one scale per tile of
    a row: the scale's rows follow the qvalue's)."""
    if not is_qarray(table):
        return table[(ids,)]
    rows = _map_leaves(lambda a: a[(ids,)], table)
    return dequantize(rows)


def table_blocks(vocab: int, dim: int, budget: int | None = None) -> int:
    """How many row blocks a quantized ``[vocab, dim]`` table is read in: the fewest that
    divide ``vocab`` with at most ``budget`` (``TABLE_BLOCK_BYTES``) bytes of f32 each."""
    from adapters_lib.models.quantize import quantize_layout

    budget = quantize_layout.TABLE_BLOCK_BYTES if budget is None else budget
    least = max(1, -(-vocab * dim * 4 // budget))
    return next(n for n in range(least, vocab + 1) if vocab % n == 0)


_NIBBLES = (jnp.dtype(jnp.int4), jnp.dtype(jnp.uint4))


def _packed(table: Any) -> Any:
    """A 4-bit table's qvalue as bytes ``[V, D/2]``, so the loop slices rows of bytes: a slice
    of the int4 array made XLA widen the whole table to a byte a value first. XLA on the CPU
    runs this bitcast as one pass writing a copy at half a byte a value (measured: a 65536×256
    int4 table's logits take 8.5 MiB of temporaries, 17 MiB sliced as int4)."""
    q = table.qvalue
    if q.dtype not in _NIBBLES or q.shape[-1] % 2:
        return table
    return table.replace(qvalue=jax.lax.bitcast_convert_type(q.reshape(*q.shape[:-1], q.shape[-1] // 2, 2),
                                                             jnp.uint8))


def _table_bytes(table: Any) -> tuple[Any, Any]:
    """(the table to slice row blocks from, the nibble type ``_rows`` bitcasts them back to):
    a ``PackedQArray`` as it is (its blocks unpack when dequantized), a 4-bit QArray through
    ``_packed`` (a copy made in the step), any other as it is."""
    if isinstance(table, PackedQArray):
        return table, None
    return _packed(table), table.qvalue.dtype if table.qvalue.dtype in _NIBBLES else None


def _rows(table: Any, start: jax.Array, size: int, nibbles: Any = None) -> Any:
    """Rows ``start:start + size`` of a quantized table (a dynamic slice of each part);
    ``nibbles``: the 4-bit type of a table ``_packed`` as bytes."""
    rows = _map_leaves(lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, axis=0), table)
    if nibbles is None:
        return rows
    q = jax.lax.bitcast_convert_type(rows.qvalue, nibbles)
    return rows.replace(qvalue=q.reshape(*q.shape[:-2], q.shape[-2] * 2))


def vocab_logits(h: jax.Array, table: Any, *, out_dtype: Any = jnp.float32) -> jax.Array:
    """``h [..., D] · tableᵀ → [..., V]`` in ``out_dtype`` (accumulated in it). A quantized
    table: a loop over its row blocks, each dequantized and written into its place in the
    logits (no stacked copy to transpose); its ∂h is ``vocab_times`` (block by block too),
    the table frozen."""
    if not is_qarray(table):
        return jnp.einsum("...d,vd->...v", h, table.astype(h.dtype), preferred_element_type=out_dtype)
    return _quantized_logits(h, table, jnp.dtype(out_dtype), jnp.dtype(h.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _quantized_logits(h: jax.Array, table: Any, out_dtype: Any, h_dtype: Any) -> jax.Array:
    del h_dtype  # the cotangent's (``_quantized_logits_bwd``)
    vocab, dim = table.shape
    n = table_blocks(vocab, dim)
    rows = vocab // n
    packed, nibbles = _table_bytes(table)

    def block(i):
        return jnp.einsum("...d,vd->...v", h, dequantize(_rows(packed, i * rows, rows, nibbles), h.dtype),
                          preferred_element_type=out_dtype)

    if n == 1:
        return block(0)

    def body(i, out):
        return jax.lax.dynamic_update_slice_in_dim(out, block(i), i * rows, axis=out.ndim - 1)

    return jax.lax.fori_loop(0, n, body, jnp.zeros((*h.shape[:-1], vocab), out_dtype))


def _quantized_logits_fwd(h, table, out_dtype, h_dtype):
    return _quantized_logits(h, table, out_dtype, h_dtype), table


def _quantized_logits_bwd(out_dtype, h_dtype, table, g):
    return vocab_times(g.astype(h_dtype), table).astype(h_dtype), None


_quantized_logits.defvjp(_quantized_logits_fwd, _quantized_logits_bwd)


def vocab_times(g: jax.Array, table: Any, *, split: int = 1) -> jax.Array:
    """``g [..., V] · table [V, D] → [..., D]`` in f32. A float table with ``split`` > 1 is
    contracted in that many vocabulary blocks (a batched matmul, then a sum: faster on a CPU
    than one contraction over 262,144 rows); a quantized one in ``table_blocks`` blocks, each
    dequantized in a loop."""
    vocab, dim = table.shape
    if not is_qarray(table):
        if split <= 1 or vocab % split:
            return jnp.einsum("...v,vd->...d", g, table, preferred_element_type=jnp.float32)
        gs = g.reshape(*g.shape[:-1], split, vocab // split)
        ts = table.reshape(split, vocab // split, dim)
        return jnp.einsum("...sv,svd->s...d", gs, ts, preferred_element_type=jnp.float32).sum(0)
    n = table_blocks(vocab, dim)
    rows = vocab // n
    packed, nibbles = _table_bytes(table)

    def body(i, acc):
        gb = jax.lax.dynamic_slice_in_dim(g, i * rows, rows, axis=g.ndim - 1)
        block = dequantize(_rows(packed, i * rows, rows, nibbles), g.dtype)
        return acc + jnp.einsum("...v,vd->...d", gb, block, preferred_element_type=jnp.float32)

    return jax.lax.fori_loop(0, n, body, jnp.zeros((*g.shape[:-1], dim), jnp.float32))
