"""``[model] quantize = "gguf"``: a GGUF base keeps its own blocks on the device.

Each tensor llama.cpp wrote in one of the block types below is held as the same numbers it
stores — its integer values, its per-block scales (and offsets), no second rounding — so the
model computes with exactly the weights the file holds, as the f32-dequantized load does, at
a fraction of the bytes:

==========  ===================================  =======================  ================
GGUF type   llama.cpp's value                     held as                  tile (scale per)
==========  ===================================  =======================  ================
Q8_0        d·q,  q int8                          int8 q                   32
Q4_0        d·(q − 8),  q 0..15                   int4 q − 8               32
Q5_0        d·(q − 16),  q 0..31                  int8 q − 16              32
Q4_1        d·q + m                               uint4 q, bias m          32
Q5_1        d·q + m                               int8 q, bias m           32
Q4_K        d·sc·q − dmin·m (256 = 8 × 32)        uint4 q, bias −dmin·m    32
Q5_K        d·sc·q − dmin·m, q 0..31              int8 q, bias −dmin·m     32
Q6_K        d·sc·(q − 32) (256 = 16 × 16)         int8 q − 32              16
==========  ===================================  =======================  ================

Scales (``d``, ``d·sc``) and offsets are float32: a super-block's ``d·sc`` (an f16 times a
6- or 8-bit integer) is exact there, not in bf16. 5- and 6-bit values have no narrower qwix
type, so they take a byte each. The arrays are ``qarray.BlockQArray`` leaves (a qwix
``QArray`` plus the offset), read by the same interceptor as the other modes
(``models.quantize``). Float tensors (F32/F16/BF16: the norms) load as floats, offset-corrected
as always; any other type (Q2_K, Q3_K, the IQ types) is dequantized to the param dtype, and the
log says which.

The values come out of llama.cpp's own unpacking (``gguf.quants``): each block is copied with
its scales set to 1 and its offsets to 0, so ``dequantize`` of the copy gives the integers;
the scales and offsets are read from their own bytes (``Q4_K.get_scale_min`` for the 6-bit
ones). A tensor is laid out as its gemma leaf by the same conversion as the float load
(``hf_convert.leaf_plan``): the integers directly, the per-block arrays repeated over their
block, converted, and taken back one per tile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapters_lib.models.gguf import GGUFError
from adapters_lib.models.quantize import quantize_layout

log = logging.getLogger(__name__)

_ONE = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
_ZERO = np.zeros(2, np.uint8)


@dataclass(frozen=True)
class Form:
    """How one GGUF block type is held: its value type, its tile, where its fields lie."""

    qtype: str
    """"int8", "int4" or "uint4"."""
    tile: int
    unit: tuple[tuple[int, np.ndarray], ...]
    """(byte offset, bytes) that make the block's own dequantize give its integers."""
    fields: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]
    """blocks (n, type_size) uint8 → (scale (n, per block), bias or None), float32."""
    values_at: int = -1
    """Where the block's int8 values lie as bytes (Q8_0: read directly, no unpacking)."""


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, at:at + 2]).view(np.float16).astype(np.float32)


def _d_only(blocks):
    return _f16(blocks, 0), None


def _d_and_m(blocks):
    return _f16(blocks, 0), _f16(blocks, 2)


def _k_scale_min(blocks):
    from gguf.quants import Q4_K

    sc, m = Q4_K.get_scale_min(np.ascontiguousarray(blocks[:, 4:16]))
    return _f16(blocks, 0) * sc.astype(np.float32), -(_f16(blocks, 2) * m.astype(np.float32))


def _q6_k_scale(blocks):
    sc = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)
    return _f16(blocks, 208) * sc, None


_K_UNIT = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], np.uint8)
"""Q4_K/Q5_K's 12 scale bytes with every 6-bit scale 1 and every 6-bit min 0."""

FORMS: dict[str, Form] = {
    "Q8_0": Form("int8", 32, ((0, _ONE),), _d_only, values_at=2),
    "Q4_0": Form("int4", 32, ((0, _ONE),), _d_only),
    "Q5_0": Form("int8", 32, ((0, _ONE),), _d_only),
    "Q4_1": Form("uint4", 32, ((0, _ONE), (2, _ZERO)), _d_and_m),
    "Q5_1": Form("int8", 32, ((0, _ONE), (2, _ZERO)), _d_and_m),
    "Q4_K": Form("uint4", 32, ((0, _ONE), (2, _ZERO), (4, _K_UNIT)), _k_scale_min),
    "Q5_K": Form("int8", 32, ((0, _ONE), (2, _ZERO), (4, _K_UNIT)), _k_scale_min),
    "Q6_K": Form("int8", 16, ((192, np.ones(16, np.uint8)), (208, _ONE)), _q6_k_scale),
}
FLOAT_TYPES = ("F32", "F16", "BF16")


def _numpy_qtype(qtype: str) -> Any:
    import ml_dtypes

    return {"int8": np.int8, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}[qtype]


@dataclass
class Blocks:
    """One GGUF tensor as its integers [rows, cols], its scales and offsets [rows, cols/tile]."""

    q: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | None
    form: Form


def read_blocks(tensor: Any, row_block: int = 4096) -> Blocks:
    """Unpack a reader tensor of a ``FORMS`` type (rows at a time: bounded host memory)."""
    from gguf import quants

    form = FORMS[tensor.tensor_type.name]
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    cols = shape[-1]
    data = tensor.data
    rows = data.reshape(-1, data.shape[-1])
    n_rows = rows.shape[0]
    q = np.empty((n_rows, cols), _numpy_qtype(form.qtype))
    tiles = cols // form.tile
    scale = np.empty((n_rows, tiles), np.float32)
    bias = None
    for start in range(0, n_rows, row_block):
        chunk = np.asarray(rows[start:start + row_block])
        blocks = chunk.reshape(-1, _type_size(tensor))
        if form.values_at >= 0:
            values = blocks[:, form.values_at:form.values_at + form.tile].view(np.int8)
        else:
            unit = blocks.copy()
            for at, value in form.unit:
                unit[:, at:at + len(value)] = value
            values = np.rint(quants.dequantize(unit, tensor.tensor_type))
            values = values.astype(np.uint8 if form.qtype == "uint4" else np.int8)
        q[start:start + chunk.shape[0]] = values.reshape(chunk.shape[0], cols)
        s, b = form.fields(blocks)
        scale[start:start + chunk.shape[0]] = s.reshape(chunk.shape[0], tiles)
        if b is not None:
            if bias is None:
                bias = np.empty((n_rows, tiles), np.float32)
            bias[start:start + chunk.shape[0]] = b.reshape(chunk.shape[0], tiles)
    return Blocks(q.reshape(shape), scale.reshape(*shape[:-1], tiles),
                  None if bias is None else bias.reshape(*shape[:-1], tiles), form)


def _type_size(tensor: Any) -> int:
    from gguf.constants import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[tensor.tensor_type][1]


# --------------------------------------------------------------------------- gemma leaves


def _per_tile_to_leaf(values: list[np.ndarray], tile: int, convert: Callable, axis: int,
                      identity: bool) -> np.ndarray:
    """Per-tile arrays of the HF tensors → the gemma leaf's per-tile array (tiles on ``axis``)."""
    if identity:
        return np.asarray(convert(*values))
    full = np.asarray(convert(*(np.repeat(v, tile, axis=-1) for v in values)))
    return np.ascontiguousarray(np.take(full, np.arange(0, full.shape[axis], tile), axis=axis))


def common(blocks: list[Blocks]) -> list[Blocks]:
    """Several tensors of one gemma leaf (k and v, gate and up) in one form, losslessly: the
    narrowest value type that holds them all (int8 when they differ), the smallest tile (each
    scale repeated over it), offsets where any has them (0 for the others)."""
    qtypes = {b.form.qtype for b in blocks}
    qtype = qtypes.pop() if len(qtypes) == 1 else "int8"
    tile = min(b.form.tile for b in blocks)
    any_bias = any(b.bias is not None for b in blocks)
    out = []
    for b in blocks:
        scale = np.repeat(b.scale, b.form.tile // tile, axis=-1)
        bias = None if not any_bias else (np.zeros_like(b.scale) if b.bias is None else b.bias)
        bias = None if bias is None else np.repeat(bias, b.form.tile // tile, axis=-1)
        q = b.q if b.form.qtype == qtype else b.q.astype(np.int8)
        out.append(Blocks(q, scale, bias, Form(qtype, tile, (), b.form.fields)))
    return out


def gemma_leaves(info: Any, arch: Any, param_dtype: str
                 ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(gemma path, numpy leaf) one at a time: a ``dict`` of q/scale/bias/qtype/tile/axis for
    a leaf kept in blocks, a float array for the rest (read as the float load reads it)."""
    from adapters_lib.models.gguf.gguf_weights import TensorSource, _dtype, aligned
    from adapters_lib.models.hf import leaf_plan

    source = TensorSource(info, arch)
    source.check_rope()
    dtype = _dtype(param_dtype)
    transpose = bool(getattr(arch, "transpose_gating", True))
    for path, names, convert in leaf_plan(arch):
        tensors = [_whole_tensor(source, n) for n in names]
        kinds = [t.tensor_type.name if t is not None else "" for t in tensors]
        leaf = None
        if all(k in FORMS for k in kinds):
            blocks = common([read_blocks(t) for t in tensors])
            q = np.ascontiguousarray(convert(*(b.q for b in blocks)))
            tile = blocks[0].form.tile
            axes = quantize_layout.tiled_axes(path, q.shape, tile, transpose_gating=transpose)
            if axes is not None:
                (axis, _), = axes.items()
                identity = path == ("embedder", "input_embedding")  # as the file holds it: no copy
                leaf = {"q": q, "qtype": blocks[0].form.qtype, "tile": tile, "axis": axis,
                        "scale": _per_tile_to_leaf([b.scale for b in blocks], tile, convert, axis, identity),
                        "bias": None if blocks[0].bias is None else
                        _per_tile_to_leaf([b.bias for b in blocks], tile, convert, axis, identity)}
            del blocks, q
        if leaf is not None:
            yield path, leaf
            continue
        if set(kinds) - set(FLOAT_TYPES):
            log.info("gguf: %s (%s) dequantized to %s", "/".join(path), ", ".join(kinds), param_dtype)
        yield path, aligned(np.asarray(convert(*(source.get(n, dtype) for n in names))))


def _whole_tensor(source: Any, hf_name: str) -> Any:
    """The reader tensor that is the whole of ``hf_name`` (None: missing, a row of a stacked
    tensor, split or filled in: the float load assembles those)."""
    key = hf_name if hf_name.startswith("model.") else f"model.{hf_name}"
    name, row = source.plan.get(key, (None, None))
    return source.tensors.get(name or "") if row is None else None


def cached_leaves(info: Any, arch: Any, param_dtype: str) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``gemma_leaves`` through the converted-weights cache (``converted_cache``, its own
    ``<dtype>-gguf-blocks`` entry): a block leaf is kept as its parts, the 4-bit values as
    bytes, so a second load reads them back instead of unpacking the file again."""
    from adapters_lib.models import converted_cache

    flat = converted_cache.leaves(list(info.shards or (info.path,)), f"{param_dtype}-gguf-blocks",
                                  lambda: _flat(gemma_leaves(info, arch, param_dtype)),
                                  label=info.path.name)
    return _unflat(flat)


def _flat(leaves: Iterator[tuple[tuple[str, ...], Any]]) -> Iterator[tuple[tuple[str, ...], np.ndarray]]:
    for path, value in leaves:
        if not isinstance(value, dict):
            yield path, value
            continue
        q = value["q"]  # 4-bit values as a byte each on disk (.npy has no int4)
        stored = q if value["qtype"] == "int8" else q.astype(np.uint8 if value["qtype"] == "uint4" else np.int8)
        yield (*path, f"#q:{value['qtype']}:{value['tile']}:{value['axis']}"), stored
        yield (*path, "#scale"), value["scale"]
        if value["bias"] is not None:
            yield (*path, "#bias"), value["bias"]


def _unflat(flat: Iterator[tuple[tuple[str, ...], np.ndarray]]) -> Iterator[tuple[tuple[str, ...], Any]]:
    pending: tuple[tuple[str, ...], dict[str, Any]] | None = None
    for path, value in flat:
        part = path[-1]
        if pending is not None and part in ("#scale", "#bias") and path[:-1] == pending[0]:
            pending[1][part[1:]] = value
            continue
        if pending is not None:
            yield pending
            pending = None
        if part.startswith("#q:"):
            _, qtype, tile, axis = part.split(":")
            q = np.asarray(value).astype(_numpy_qtype(qtype)) if qtype != "int8" else value
            pending = (path[:-1], {"q": q, "qtype": qtype, "tile": int(tile), "axis": int(axis),
                                   "scale": None, "bias": None})
            continue
        yield path, value
    if pending is not None:
        yield pending


def load_gguf_blocks(info: Any, arch: Any, param_dtype: str, sharding: Callable[..., Any]) -> dict:
    """The params tree of a GGUF with its block tensors as ``BlockQArray`` leaves, each part
    placed by ``sharding`` (the integers like the float weight, the per-tile arrays on the
    same mesh axes where they divide)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    tree: dict[str, Any] = {}
    for path, value in cached_leaves(info, arch, param_dtype):
        keys = tuple(jax.tree_util.DictKey(p) for p in path)
        if isinstance(value, dict):
            q = value["q"]
            where = sharding(keys, jax.ShapeDtypeStruct(q.shape, jnp.dtype(param_dtype)))
            per_tile = qarray.scale_sharding(where, q.shape, {value["axis"]: value["tile"]})
            placed = qarray.BlockQArray(
                qvalue=jax.device_put(q, where), scale=jax.device_put(value["scale"], per_tile),
                bias=None if value["bias"] is None else jax.device_put(value["bias"], per_tile),
                qtype=jnp.dtype(q.dtype), float_dtype=jnp.dtype(param_dtype))
        else:
            placed = jax.device_put(value, sharding(keys, jax.ShapeDtypeStruct(value.shape, value.dtype)))
        del value
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = placed
    return tree


__all__ = ["FORMS", "GGUFError", "load_gguf_blocks", "read_blocks"]
