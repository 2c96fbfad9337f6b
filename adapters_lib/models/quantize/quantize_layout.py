"""The quantized base's layout, pure (no JAX): which weights are quantized, their tiles,
their bytes, and the one-line refusals (``models.quantize`` holds the arrays; ``memory.estimate``, the
Models screen and the config checks read this)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from adapters_lib.config import QUANTIZE_MODES as MODES
from adapters_lib.errors import WorkbenchError

QUANTIZED = ("int8", "int4", "nf4")
DEFAULT_TILE = 64
BITS = {"int8": 8, "int4": 4, "nf4": 4}
WHERE = "[model] quantize"
TABLE_BLOCK_BYTES = 16 << 20
"""Largest f32 block of a quantized embedding table dequantized at once (``qarray``)."""
TILE_WHERE = "[model] quantize_tile_size"

QUANTIZED_KINDS = ("q_einsum", "kv_einsum", "k_einsum", "qkv_einsum", "attn_vec_einsum",
                   "gating_einsum", "linear", "input_embedding", "per_layer_embeddings")
QARRAY_FIELDS = ("qvalue", "scale", "zero_point", "bias")
"""The names a QArray's children take in a params key path (``mesh.logical_axes`` skips them)."""


def _kind(path: tuple[str, ...]) -> str:
    leaf = path[-1]
    return path[-2] if leaf == "w" and len(path) >= 2 else leaf


def tiled_axes(path: tuple[str, ...], shape: tuple[int, ...], tile: int, *,
               transpose_gating: bool = True) -> dict[int, int] | None:
    """qwix's ``tiled_axes`` for a base weight (axis → tile; 1 = one scale per index along
    it), or None when the weight stays float. Axes not named are channelwise: the embedding
    tables get one scale per tile of each row (a lookup dequantizes its rows only)."""
    kind, n = _kind(path), len(shape)
    if path and path[0] == "embedder":
        if kind == "input_embedding" and n == 2:  # (V, D)
            return {1: tile}
        if kind == "per_layer_embeddings" and n == 3:  # Gemma 4's (V, layers, P)
            return {2: tile}
        return None
    if kind in ("q_einsum", "k_einsum") and n == 3:  # (N, D, H); Gemma 4's k=v (K, D, H)
        return {1: tile}
    if kind in ("kv_einsum", "qkv_einsum") and n == 4:
        return {2: tile}
    if kind == "attn_vec_einsum" and n == 3:
        return {1: tile}
    if kind == "gating_einsum" and n == 3:
        return {2: tile} if transpose_gating else {1: tile}
    if kind == "gating_einsum" and n == 4:  # a MoE expert bank (E, 2, X, D)
        return {3: tile}
    if kind == "linear" and n == 2:
        return {0: tile}
    if kind == "linear" and n == 3:  # a MoE expert bank (E, X, D)
        return {1: tile}
    return None


def mode_of(path: tuple[str, ...], mode: str, table: str = "auto") -> str:
    """The mode one weight is held in: the embedding tables follow ``table``
    (``[model] quantize_embedding``) unless it is "auto", the rest ``mode``."""
    if table != "auto" and path and path[0] == "embedder":
        return table
    return mode


def _names(path: Iterable[Any]) -> tuple[str, ...]:
    out = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                out.append(str(getattr(k, attr)))
                break
        else:
            out.append(str(k))
    return tuple(out)


def check(mode: str, tile: int, shapes: dict[tuple[str, ...], tuple[int, ...]], *,
          transpose_gating: bool = True, table: str = "auto") -> None:
    """Refuse a mode or a tile that cannot quantize these weights, in one line naming the key."""
    if mode not in MODES:
        raise WorkbenchError(f"model.quantize is {mode!r}", where=WHERE,
                             hint=f"expected one of {', '.join(MODES)}")
    if mode not in QUANTIZED:
        return
    for path, shape in shapes.items():
        if mode_of(path, mode, table) not in QUANTIZED:
            continue
        axes = tiled_axes(path, shape, tile, transpose_gating=transpose_gating)
        for axis, size in (axes or {}).items():
            if size > 1 and shape[axis] % size:
                raise WorkbenchError(
                    f"model.quantize_tile_size {tile} does not divide {'/'.join(path)} "
                    f"(dim {axis} of {tuple(shape)} is {shape[axis]})", where=TILE_WHERE,
                    hint=f"pick a tile that divides {shape[axis]}, e.g. "
                         f"{math.gcd(shape[axis], tile)}")


def quantized_bytes(shape: tuple[int, ...], mode: str, tile: int, scale_bytes: int = 4) -> int:
    """Device bytes of one weight held as ``mode`` (packed qvalues + the scales)."""
    n = math.prod(shape)
    return (n * BITS[mode] + 7) // 8 + (n // max(tile, 1)) * scale_bytes


def arch_shapes(arch: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """(path, shape) of a Gemma 2/3 text model's weights from an ``Arch`` or its fields as a
    mapping (``vocab_size``, ``embed_dim``, …; the Models screen's ``arch``), norms left out."""
    def get(name: str, default: Any = 0) -> Any:
        return arch.get(name, default) if isinstance(arch, dict) else getattr(arch, name, default)

    v, d, f = int(get("vocab_size")), int(get("embed_dim")), int(get("hidden_dim"))
    n, h, k = int(get("num_heads")), int(get("head_dim")), int(get("num_kv_heads"))
    gating = (2, f, d) if get("transpose_gating", True) else (2, d, f)
    out: dict[tuple[str, ...], tuple[int, ...]] = {("embedder", "input_embedding"): (v, d)}
    for i in range(int(get("num_layers"))):
        p = f"layer_{i}"
        if k == n and k:
            out[(p, "attn", "qkv_einsum", "w")] = (3, n, d, h)
        else:
            out[(p, "attn", "q_einsum", "w")] = (n, d, h)
            out[(p, "attn", "kv_einsum", "w")] = (2, k, d, h)
        out[(p, "attn", "attn_vec_einsum", "w")] = (n, h, d)
        out[(p, "mlp", "gating_einsum")] = gating
        out[(p, "mlp", "linear")] = (f, d)
    return out


def held_bytes(arch: Any, mode: str, tile: int = DEFAULT_TILE, param_bytes: int = 2,
               table: str = "auto") -> int:
    """Bytes of a model's weights held as ``mode`` (the table as ``table`` says, the scales
    in ``param_bytes``), norms left out: what the Models screen shows per mode."""
    total = 0
    for path, shape in arch_shapes(arch).items():
        held = mode_of(path, mode, table) if mode in QUANTIZED else mode
        if held in QUANTIZED and tiled_axes(path, shape, tile) is not None:
            total += quantized_bytes(shape, held, tile, scale_bytes=param_bytes)
        else:
            total += math.prod(shape) * param_bytes
    return total


def describe(mode: str, tile: int) -> str:
    if mode == "gguf":
        return "the GGUF's own blocks (Q8_0/Q5_x/Q6_K as int8, Q4_x as int4) with their scales"
    if mode not in QUANTIZED:
        return "float base" if mode == "none" else f"base quantized as {mode}"
    return (f"{mode} weights (tile {tile}) in the attention and MLP projections and the "
            "embedding table; norms in the param dtype")
