"""GPTQ for the quantized base (``[model] quantize_method = "gptq"``): each projection's
4/8-bit weights chosen to keep its *outputs* on calibration text, not its weights.

Round-to-nearest (``"rtn"``, the default: qwix's ``quantize``, absmax per tile) rounds every
weight alone. GPTQ (Frantar et al., 2022; qwix's ``contrib.gptq``) rounds one input column at a
time and moves the rounding error onto the columns not yet rounded, weighted by the inverse
of ``H = XᵀX`` (the layer's inputs on calibration text), minimising ``‖XW − XŴ‖²``. The
result has the very layout, tiles, scales and dtypes of ``"rtn"`` (``models.quantize``): the
model, the LoRA step, sampling and export read it unchanged.

- Calibration: ``CALIBRATION_ROWS`` rows of ``CALIBRATION_LENGTH`` tokens (BOS first) from
  ``[model] quantize_calibration`` (any ``[data] path``; "" = the run's own ``[data] path``),
  ``models.quantize.quantize_calibration``: each row consecutive records' text from one of as many
  places spread over the source; one forward pass of the float base a row collects every
  projection's ``H`` (``nn.intercept_methods`` + ``sow``).
- The weights GPTQ takes: gemma's ``Einsum`` projections (q/k/v/o, gate/up, down) whose tiled
  axis is their last contracted one (all of Gemma 2/3/4's), and the tied embedding table as
  what the logits read (``Embedder.decode``: ``H`` of the final hidden states; its rows, looked
  up as embeddings, are then GPTQ's too). Gemma 4's per-layer-input table and a MoE expert
  bank stay round-to-nearest. ``quantize_embedding`` still says which type the table takes.
- ``gptq_weight`` is qwix's ``gptq_core.quantize_weight`` as XLA can compile it: qwix's loops
  are Python loops (one traced op per column: 81 s for one 1024×640 weight, eager, here), these
  are ``fori_loop`` over qwix's own ``find_params``/``quantize``; equal to qwix's on its inputs
  (``tests/test_quantize_gptq.py``). Act-order (``ACT_ORDER``, on) and the tiles' scales
  searched against ``H`` (``CLIP``, on: ``clipped_scales``) are what qwix lacks.
- ``held_leaves``: the results as host arrays, kept in the converted-weights cache
  (``converted_cache``) by the model's files and a digest of the calibration tokens and
  settings, so a run's later loads skip calibration and GPTQ.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from adapters_lib.config import QUANTIZE_METHODS as METHODS
from adapters_lib.models.quantize.quantize_calibration import (
    CALIBRATION_LENGTH,
    CALIBRATION_ROWS,
    TABLE_EQN,
    as_matrix,
    calibration_rows,
    from_matrix,
    hessians,
    takes,
)

BLOCK = 128
"""GPTQ's lazy-update block (qwix's and the paper's default)."""
DAMP = 0.01
"""GPTQ's damping: this fraction of ``H``'s mean diagonal added to it (qwix's default)."""
ACT_ORDER = True
"""GPTQ's act-order: the columns rounded by falling ``H`` diagonal (most used inputs first),
each tile's scale taken from the weight as it is (static groups, so the layout stays
round-to-nearest's). On the real 270M nf4: 1.049× → 1.031× of f32 (float table)."""
CLIP = True
"""With act-order's static tiles: each tile's scale searched (``clipped_scales``)."""
ROWS = 32768
"""Rows of a weight GPTQ takes at once (``quantize_weight``)."""
PROGRESS = "GPTQ"
"""How the log lines of a base being rounded begin (the Train screen's header reads them)."""

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the algorithm


def gptq_weight(w: Any, h: Any, qtype: Any, tile: int, *, block: int = BLOCK,
                damp: float = DAMP, act_order: bool = False, clip: bool = False) -> tuple[Any, Any]:
    """``w`` (rows × columns, columns contracted) quantized by GPTQ with ``h`` (columns ×
    columns): (qvalue, scale) with one scale per row and ``tile`` columns, as qwix's
    ``gptq_core.quantize_weight`` gives for ``HowToQuantize(qtype, channelwise_axes=(0,),
    tiled_axes={1: tile})`` (absmax scales found per block, at the block's start). With
    ``act_order`` (what qwix lacks; AutoGPTQ's ``desc_act`` with ``static_groups``) the columns
    go by falling ``h`` diagonal and every tile keeps the absmax scale of the weight as given;
    with ``clip`` too, that scale shrunk as ``clipped_scales`` finds best."""
    import jax
    import jax.numpy as jnp
    from qwix._src.core import qarray as qa
    from qwix.contrib import gptq_core

    rows, cols = w.shape
    how = qa.HowToQuantize(qtype=qtype, channelwise_axes=(0,), tiled_axes={1: tile})
    if block % tile or cols % block:
        block = tile
    w = w.astype(jnp.float32)
    h = h.astype(jnp.float32)
    diag = jnp.diag(h)
    dead = diag == 0  # an input never nonzero: its weights do not matter
    h = jnp.where(dead & jnp.eye(cols, dtype=bool), 1.0, h)
    w = jnp.where(dead, 0.0, w)
    if act_order:  # columns by falling H diagonal, scales of the tiles as they are (static groups)
        tiles = w.reshape(rows * (cols // tile), tile)  # row-major: row r's tiles in order
        static = gptq_core.find_params(tiles, how)[0]
        if clip:
            static = clipped_scales(tiles, static, qtype, jnp.tile(jnp.diag(h), rows).reshape(-1, tile))
        static = static.reshape(rows, cols // tile)
        perm = jnp.argsort(-jnp.diag(h))
        w, h = w[:, perm], h[perm][:, perm]
        col_scales = static[:, perm // tile]
    h = h.at[jnp.arange(cols), jnp.arange(cols)].add(damp * jnp.mean(diag))
    hinv = jnp.linalg.cholesky(gptq_core.cholesky_inverse(jnp.linalg.cholesky(h)), upper=True)
    qdtype = qa.quantize_with_scale_zero_point(w[:, :1], qtype, jnp.ones((rows, 1)), None).qvalue.dtype
    groups = block // tile
    index = jnp.arange(cols)

    def one_block(b, carry):
        w, q, s = carry
        start = b * block
        wb = jax.lax.dynamic_slice_in_dim(w, start, block, 1)
        if act_order:
            scales = jax.lax.dynamic_slice_in_dim(col_scales, start, block, 1)  # one a column
        else:
            scales = jnp.stack([gptq_core.find_params(wb[:, k * tile:(k + 1) * tile], how)[0][:, 0]
                                for k in range(groups)], 1)
        hb = jax.lax.dynamic_slice(hinv, (start, start), (block, block))

        def one_column(i, c):
            wb, qb, err = c
            col = jax.lax.dynamic_index_in_dim(wb, i, 1, keepdims=False)
            scale = jax.lax.dynamic_index_in_dim(scales, i if act_order else i // tile, 1, keepdims=False)
            qv, dq = gptq_core.quantize(col, qtype, scale, None)
            e = (col - dq) / hb[i, i]
            wb = wb - jnp.outer(e, hb[i])  # upper triangular: the columns from i on
            qb = jax.lax.dynamic_update_index_in_dim(qb, qv.astype(qdtype), i, 1)
            return wb, qb, jax.lax.dynamic_update_index_in_dim(err, e, i, 1)

        wb, qb, err = jax.lax.fori_loop(0, block, one_column,
                                        (wb, jnp.zeros((rows, block), qdtype), jnp.zeros_like(wb)))
        later = jax.lax.dynamic_slice_in_dim(hinv, start, block, 0) * (index >= start + block)
        w = jax.lax.dynamic_update_slice_in_dim(w - err @ later, wb, start, 1)
        q = jax.lax.dynamic_update_slice_in_dim(q, qb, start, 1)
        if act_order:
            return w, q, s
        return w, q, jax.lax.dynamic_update_slice_in_dim(s, scales, b * groups, 1)

    init = (w, jnp.zeros((rows, cols), qdtype), jnp.zeros((rows, cols // tile), jnp.float32))
    _, q, s = jax.lax.fori_loop(0, cols // block, one_block, init)
    if act_order:
        return q[:, jnp.argsort(perm)], static
    return q, s


CLIP_GRID = tuple(1.0 - 0.02 * i for i in range(11))
"""The factors ``clipped_scales`` tries on each tile's absmax scale (GPTQ's reference code
searches down to 0.8 too: its ``Quantizer(mse=True)``, ``maxshrink=0.8``)."""


def clipped_scales(tiles: Any, scale: Any, qtype: Any, weight: Any) -> Any:
    """Each tile's scale (``tiles``: one a row; ``scale``: rows × 1) shrunk by the factor of
    ``CLIP_GRID`` whose rounding has the least squared error weighted by ``weight`` (the
    diagonal of ``H`` a column: the error a weight puts on the layer's outputs, the inputs'
    correlations left out). A tile's few largest weights are clipped so that the rest round
    finer: on the real 270M nf4 (float table), 1.031× → 1.015× of f32's perplexity."""
    import jax.numpy as jnp
    from qwix.contrib import gptq_core

    best, best_err = scale, jnp.full(scale.shape, jnp.inf, jnp.float32)
    for f in CLIP_GRID:
        s = scale * f
        _, dq = gptq_core.quantize(tiles, qtype, s, None)
        err = jnp.sum((dq - tiles) ** 2 * weight, axis=1, keepdims=True)
        better = err < best_err
        best, best_err = jnp.where(better, s, best), jnp.where(better, err, best_err)
    return best


@functools.lru_cache(maxsize=32)
def _compiled(qtype_name: str, tile: int, shape: tuple[int, int], act_order: bool, block: int,
              clip: bool):
    import jax

    from adapters_lib.models.gemma_layers import qtype

    return jax.jit(lambda w, h: gptq_weight(w, h, qtype(qtype_name), tile, block=block,
                                            act_order=act_order, clip=clip))


# --------------------------------------------------------------------------- the params


def quantize_weight(eqn: str, w: Any, h: Any, mode: str, tile: int, axes: dict[int, int]) -> Any:
    """One projection quantized by GPTQ, as the QArray ``qwix.quantize`` gives for it. Rows
    are independent in GPTQ (one ``H`` for all, a scale per row and tile): a tall weight — a
    262,144-row table — goes ``ROWS`` rows at a time, so its f32 working copies stay small."""
    import jax.numpy as jnp
    import qwix

    from adapters_lib.models.gemma_layers import qtype

    (axis,) = axes
    m = as_matrix(eqn, w)
    # an int8 table is not clipped: its rows are the embeddings too, whose inputs H does not
    # see (clipped, the real 270M's nf4 base with an int8 table went 1.015× → 1.058×)
    clip = ACT_ORDER and CLIP and not (eqn == TABLE_EQN and mode == "int8")
    parts = [_compiled(mode, tile, tuple(m[i:i + ROWS].shape), ACT_ORDER, BLOCK, clip)(m[i:i + ROWS], h)
             for i in range(0, m.shape[0], ROWS)]
    q = jnp.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    s = jnp.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    scale = from_matrix(eqn, s, tuple(w.shape), axis, tile).astype(w.dtype)
    return qwix.QArray(qvalue=from_matrix(eqn, q, tuple(w.shape), axis, tile), scale=scale,
                       zero_point=None, qtype=qtype(mode))


def as_qarray(held: tuple[Any, Any], mode: str, dtype: Any) -> Any:
    """A ``held_leaves`` entry (host qvalue, f32 scale) as the QArray qwix gives ``mode``
    (qvalue int8 / int4 / nf4's uint4 indices, the scale in ``dtype``), on the default device."""
    import jax.numpy as jnp
    import qwix

    from adapters_lib.models.gemma_layers import qtype

    qv, scale = held
    narrow = {"int8": jnp.int8, "int4": jnp.int4, "nf4": jnp.uint4}[mode]
    return qwix.QArray(qvalue=jnp.asarray(qv).astype(narrow), scale=jnp.asarray(scale).astype(dtype),
                       zero_point=None, qtype=qtype(mode))


VERSION = 3
"""Part of the cache key: raised when what GPTQ computes for the same inputs changes."""


def held_leaves(loaded: Any, spec: Any) -> dict[tuple[str, ...], tuple[Any, Any]]:
    """Every leaf GPTQ takes under ``spec`` as host arrays (qvalue as int8/uint8, scale as f32)
    by params path: computed from ``loaded`` (its float params, before they are quantized), or
    read back from the converted-weights cache (``converted_cache``: keyed by the model's files
    and a digest of the calibration tokens and every setting, so a run's second load — resume,
    eval, Compare in a new engine — skips the calibration and GPTQ)."""
    import hashlib
    import json

    import numpy as np

    rows = calibration_rows(spec.quantize_calibration, loaded.tokenizer)
    files = _model_files(spec.source)

    def compute():
        yield from _compute(loaded, spec, rows)

    if files is None:
        flat = compute()
    else:
        from adapters_lib.models import converted_cache

        dtype = str(np.dtype(_float_dtype(loaded.params)))
        key = hashlib.sha256(json.dumps([VERSION, BLOCK, DAMP, spec.quantize, spec.quantize_tile_size,
                                         spec.quantize_embedding, dtype, rows]).encode()).hexdigest()[:16]
        flat = converted_cache.leaves(files, f"{dtype}-gptq-{spec.quantize}-{key}", compute,
                                      label=f"GPTQ {spec.quantize} of {spec.source}")
    out: dict[tuple[str, ...], list[Any]] = {}
    for path, value in flat:
        out.setdefault(tuple(path[:-1]), [None, None])[0 if path[-1] == "#q" else 1] = value
    return {k: (q, s) for k, (q, s) in out.items()}


def _compute(loaded: Any, spec: Any, rows: list[list[int]]):
    import jax
    import numpy as np

    from adapters_lib.models.quantize.quantize_layout import QUANTIZED, _names, mode_of, tiled_axes

    t0 = time.perf_counter()
    log.info("%s %s of %s: calibrating on %d rows of %d tokens (once: the weights cache keeps it)",
             PROGRESS, spec.quantize, spec.source, len(rows), CALIBRATION_LENGTH)
    found = hessians(loaded, rows)
    log.info("%s %s: inputs collected in %.1f s; rounding %d weights", PROGRESS, spec.quantize,
             time.perf_counter() - t0, sum(1 for k in found if k[-1] != "eqn"))
    transpose = bool(getattr(loaded.config, "transpose_gating_einsum", True))
    for path, w in jax.tree_util.tree_flatten_with_path(loaded.params)[0]:
        names = _names(path)
        held = mode_of(names, spec.quantize, spec.quantize_embedding)
        axes = tiled_axes(names, tuple(w.shape), spec.quantize_tile_size, transpose_gating=transpose) \
            if held in QUANTIZED else None
        eqn = found.get((*names, "eqn"))
        if eqn is None or not takes(eqn, tuple(w.shape), axes):
            continue
        q = quantize_weight(eqn, w, found[names], held, spec.quantize_tile_size, axes)
        stored = np.asarray(q.qvalue).astype(np.int8 if held != "nf4" else np.uint8)  # .npy: no int4
        yield (*names, "#q"), stored
        yield (*names, "#scale"), np.asarray(q.scale, np.float32)
    log.info("%s %s: done in %.1f s", PROGRESS, spec.quantize, time.perf_counter() - t0)


def _float_dtype(params: Any) -> Any:
    import jax
    import jax.numpy as jnp

    for x in jax.tree.leaves(params):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return x.dtype
    return jnp.float32


def _model_files(source: str) -> list[Any] | None:
    """The files a model is read from (the cache's key), or None (the demo: nothing on disk)."""
    from pathlib import Path

    if source == "demo":
        return None
    from adapters_lib.catalog import resolve

    entry = resolve(source)
    where = entry.checkpoint or entry.path
    if not where:
        return None
    p = Path(where)
    return [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) or None


__all__ = ["CALIBRATION_LENGTH", "CALIBRATION_ROWS", "METHODS", "TABLE_EQN", "as_matrix", "as_qarray",
           "calibration_rows", "from_matrix", "gptq_weight", "held_leaves", "hessians", "quantize_weight",
           "takes"]
