"""A generation copy's projection weights laid out for decoding: no weight copied per token.

Profiled on the real 270M (f32, A/B decode of 17 tokens, 2 cores): more than half of a decode
step was XLA:CPU copying every projection weight into the layout its dot reads
(``copy_bitcast_fusion`` of each ``q``/``kv``/``attn_vec``/``gating`` weight, inside the
decode loop: layout assignment runs after loop-invariant code motion, so the copy is made at
every token). A generation copy (``models.loader.load_model(generation_dtype=...)``: made once, kept)
holds those weights already transposed into that layout — ``Permuted`` leaves, the array and
its permutation — and the model reads them through an Einsum interceptor that applies the
einsum with the equation permuted alike (``permuted_eqn``): the same product, no copy left in
the loop (tests/test_decode_timing.py compiles the decode and looks).

``PERMS``: the layout XLA:CPU's dot asked for, per Gemma 2/3 einsum kind (read from the
compiled decode program's copies): the contracted axes first, in the order of the
activation's. Other families are not permuted (their weights stay as they are).

Leaves that are not ``Permuted`` (a quantized base's ``QArray``, the embedding table, the
norms) are read as before; ``standard(params)`` undoes the layout (an export of a model that
holds one).

An int8 base's generation copy (``quantize = "int8"`` with a ``generation_dtype``) holds its
projections and its tied table as ``Int8Rows`` instead (``int8_copy``): each output channel's
int8 values contiguous (the contracted axes minor), blocks major. A projection keeps the
base's own tiles (same int8 values, same scales): a tile is a block, and the model reads it
with an int8 × int8 dot per block (``int8_einsum``): the activation row is quantized at that
dot with one absmax scale per block (as llama.cpp's Q8 activations), the dots accumulate in
int32 and both scales come after. The table is re-quantized with one scale a row, and its
logits are one int8 × int8 dot (blocks there cost ~2.5× a single dot). Measured on the real
270M (2 cores): XLA:CPU's dot of a tiled QArray writes the dequantized weight first, every
token, and a dot of int8 converted to bf16 does the same; the int8 × int8 dot reads the
weight as it lies, a byte a value. The tolerance it costs: ``ROW_KINDS``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

PERMS = {
    "q_einsum": (1, 0, 2),  # N D H → D N H        (BTD,NDH->BTNH)
    "kv_einsum": (0, 1, 3, 2),  # C K D H → C K H D  (BSD,CKDH->CBSKH)
    "attn_vec_einsum": (1, 0, 2),  # N H D → H N D   (BTNH,NHD->BTD)
    "gating_einsum": (2, 0, 1),  # C F D → D C F     (BTD,CFD->BTCF)
}
FAMILIES = ("gemma2", "gemma3")


def _pytree() -> type:
    import jax

    @jax.tree_util.register_pytree_node_class
    class Permuted:
        """A weight stored transposed: ``value = transpose(w, perm)``."""

        def __init__(self, value: Any, perm: tuple[int, ...]):
            self.value, self.perm = value, perm

        def tree_flatten(self):
            return (self.value,), self.perm

        @classmethod
        def tree_unflatten(cls, perm, children):
            return cls(children[0], perm)

        @property
        def shape(self) -> tuple[int, ...]:
            """The weight's own shape (what the module declares)."""
            return tuple(self.value.shape[self.perm.index(i)] for i in range(len(self.perm)))

        @property
        def dtype(self) -> Any:
            return self.value.dtype

    return Permuted


def _named(cls: type, name: str) -> type:
    """``cls`` findable as ``decode_layout.<name>`` (module ``__getattr__``): the program store
    pickles a params tree's structure, and with it the leaf class, by that name."""
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = __name__
    return cls


Permuted = functools.cache(lambda: _named(_pytree(), "_PermutedLeaf"))
"""``Permuted()`` is the leaf class (made once, when JAX is imported)."""


def _rows_pytree() -> type:
    import jax
    import jax.numpy as jnp

    @jax.tree_util.register_pytree_node_class
    class Int8Rows:
        """A weight as int8 rows: ``q [N, K]`` with ``scale [N]`` (``N``: its free axes,
        ``K``: the contracted ones, each in the weight's own order; a table ``[V, D]`` keeps
        its shape, which flax checks), or cut in blocks of ``K``: ``q [blocks, N, K /
        blocks]`` with ``scale [blocks, N]``; ``w ≈ q · scale`` (scales in the dtype the weight
        stands for: a params tree's first float leaf says the generation dtype, as before). An activation
        row is quantized with one scale, or one per block."""

        def __init__(self, q: Any, scale: Any, shape: tuple[int, ...], contract: tuple[int, ...],
                     float_dtype: str):
            self.q, self.scale = q, scale
            self.shape, self.contract, self.float_dtype = shape, contract, float_dtype

        def tree_flatten(self):
            return (self.q, self.scale), (self.shape, self.contract, self.float_dtype)

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children, *aux)

        @property
        def dtype(self) -> Any:
            """What a read gives (the generation dtype), as a quantized leaf's ``dtype``."""
            return jnp.dtype(self.float_dtype)

    return Int8Rows


Int8Rows = functools.cache(lambda: _named(_rows_pytree(), "_Int8RowsLeaf"))
"""``Int8Rows()`` is the int8 row leaf class."""


def __getattr__(name: str) -> Any:
    if name == "_PermutedLeaf":
        return Permuted()
    if name == "_Int8RowsLeaf":
        return Int8Rows()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

CONTRACTED = {"q_einsum": (1,), "k_einsum": (1,), "kv_einsum": (2,), "qkv_einsum": (2,),
              "attn_vec_einsum": (0, 1), "gating_einsum": (2,), "linear": (0,), "input_embedding": (1,)}
"""The axes each Gemma 2/3 weight's einsum contracts (``gating_einsum``'s (2, D, F): axis 1)."""
ROW_KINDS = ("input_embedding",)
"""Weights re-quantized with one scale a row (and their activation rows with one scale each):
the tied table, whose logits a dot per block would slow by ~2.5×. The projections keep the
base's own tiles (blocks of the contracted axes) and their activations get one scale a tile.
Measured on the real 270M (KL to the f32 logits, three held-out texts): one scale a row
everywhere took it from 0.002 (the int8 base read in floats) to 0.04; tiles kept, ~0.005."""
_NDIM = {"q_einsum": 3, "k_einsum": 3, "kv_einsum": 4, "qkv_einsum": 4, "attn_vec_einsum": 3,
         "gating_einsum": 3, "linear": 2, "input_embedding": 2}


def permuted_eqn(eqn: str, perm: tuple[int, ...]) -> str:
    """``eqn`` with its second operand's labels permuted as the weight was."""
    lhs, rest = eqn.split(",", 1)
    rhs, out = rest.split("->", 1)
    return f"{lhs},{''.join(rhs[p] for p in perm)}->{out}"


def _perm_for(kind: str, shape: tuple[int, ...], config: Any) -> tuple[int, ...] | None:
    perm = PERMS.get(kind)
    if perm is None or len(shape) != len(perm):
        return None
    if kind == "gating_einsum" and shape[-1] != config.embed_dim:  # the (2, D, F) variant
        return (1, 0, 2) if shape[1] == config.embed_dim else None
    return perm


def permute(params: Any, config: Any, family: str) -> Any:
    """``params`` with the projection weights in the decode layout (new arrays; the others
    as they are). Only Gemma 2/3 (``FAMILIES``); anything else comes back unchanged."""
    import jax
    import jax.numpy as jnp

    if family not in FAMILIES:
        return params
    leaf_class = Permuted()

    def one(path: Any, x: Any) -> Any:
        names = [str(getattr(k, "key", k)) for k in path]
        kind = names[-2] if names[-1] == "w" and len(names) > 1 else names[-1]
        perm = _perm_for(kind, tuple(getattr(x, "shape", ())), config) if isinstance(x, jax.Array) else None
        if perm is None:
            return x
        return leaf_class(jnp.transpose(x, perm), perm)

    return jax.tree_util.tree_map_with_path(one, params)


def standard(params: Any) -> Any:
    """``params`` back in the model's own layout."""
    import jax
    import jax.numpy as jnp

    leaf_class = Permuted()

    def back(x: Any) -> Any:
        if isinstance(x, leaf_class):
            inverse = tuple(x.perm.index(i) for i in range(len(x.perm)))
            return jnp.transpose(x.value, inverse)
        return x

    return jax.tree.map(back, params, is_leaf=lambda x: isinstance(x, leaf_class))


def holds(params: Any) -> bool:
    """Whether ``params`` is a generation copy's (``Permuted`` or ``Int8Rows`` leaves)."""
    import jax

    classes = (Permuted(), Int8Rows())
    return any(isinstance(x, classes) for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, classes)))


def to_int8_rows(w: Any, contract: tuple[int, ...], float_dtype: Any, block: int = 0) -> Any:
    """A weight (floats, or a quantized leaf: dequantized first) as ``Int8Rows``; ``block``
    (dividing the contracted size): the activation's block (0: a whole row)."""
    import math

    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    dense = qarray.dequantize(w, jnp.float32) if qarray.is_qarray(w) else jnp.asarray(w, jnp.float32)
    free = tuple(a for a in range(dense.ndim) if a not in contract)
    n, k = math.prod(dense.shape[a] for a in free), math.prod(dense.shape[a] for a in contract)
    block = block if block and k % block == 0 else k
    # [blocks, N, block]: blocks major (the dot's batch); a tile of the base is a block, and
    # its int8 values come back as they were (absmax again over the same values)
    rows = jnp.transpose(jnp.transpose(dense, free + contract).reshape(n, k // block, block), (1, 0, 2))
    scale = jnp.max(jnp.abs(rows), axis=2) / 127.0
    scale = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(rows / scale[..., None]), -127, 127).astype(jnp.int8)
    scale = scale.astype(float_dtype)
    if block == k:
        q, scale = q[0], scale[0]
    return Int8Rows()(q, scale, tuple(dense.shape), contract, str(jnp.dtype(float_dtype)))


def _tile(x: Any, contract: tuple[int, ...]) -> int:
    """A quantized leaf's tile along its last contracted axis (its qvalue over its scale)."""
    a = contract[-1]
    return x.qvalue.shape[a] // max(1, x.scale.shape[a]) if x.scale.ndim == x.qvalue.ndim else 0


def _contract_for(kind: str, shape: tuple[int, ...], config: Any) -> tuple[int, ...] | None:
    contract = CONTRACTED.get(kind)
    if contract is None or len(shape) != _NDIM[kind]:
        return None
    if kind == "gating_einsum" and shape[-1] != config.embed_dim:  # the (2, D, F) variant
        return (1,) if shape[1] == config.embed_dim else None
    return contract


def int8_rows(params: Any, config: Any, family: str, float_dtype: Any) -> Any:
    """``params`` with an int8 base's quantized projections and table as ``Int8Rows`` (the
    rest as they are). Only Gemma 2/3, only int8 leaves (an int4 or GGUF block base keeps its
    own: their rows would be wider than they are)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    if family not in FAMILIES:
        return params

    def one(path: Any, x: Any) -> Any:
        if not qarray.is_qarray(x) or x.qvalue.dtype != jnp.int8 or getattr(x, "bias", None) is not None:
            return x
        names = [str(getattr(k, "key", k)) for k in path]
        kind = names[-2] if names[-1] == "w" and len(names) > 1 else names[-1]
        contract = _contract_for(kind, tuple(x.qvalue.shape), config)
        return x if contract is None else to_int8_rows(x, contract, float_dtype,
                                                            0 if kind in ROW_KINDS else _tile(x, contract))

    return jax.tree_util.tree_map_with_path(one, params, is_leaf=qarray.is_qarray)


def _labels(eqn: str, x_ndim: int) -> tuple[str, str, str]:
    """``eqn``'s operands and output with ``...`` spelled out (letters it does not use)."""
    lhs, rest = eqn.split(",", 1)
    rhs, out = rest.split("->", 1)
    if "..." in lhs:
        spare = "".join(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in eqn)
        dots = spare[: x_ndim - (len(lhs) - 3)]
        lhs, out = lhs.replace("...", dots), out.replace("...", dots)
    return lhs, rhs, out


def int8_einsum(eqn: str, x: Any, w: Any) -> Any:
    """``einsum(eqn, x, w)`` of an ``Int8Rows`` weight: ``x``'s rows quantized to int8 (one
    absmax scale each), an int8 × int8 dot accumulated in int32, both scales after; in
    ``x``'s dtype. ``x``'s contracted axes are moved last (in the weight's order) first."""
    import math

    import jax
    import jax.numpy as jnp

    lhs, rhs, out = _labels(eqn, x.ndim)
    summed = [rhs[a] for a in w.contract]
    free_w = [c for i, c in enumerate(rhs) if i not in w.contract]
    free_x = [c for c in lhs if c not in summed]
    if sorted(free_x + free_w) != sorted(out) or any(c in out for c in summed):
        raise ValueError(f"{eqn}: not a contraction of an Int8Rows weight's axes {w.contract}")
    xt = jnp.transpose(x, [lhs.index(c) for c in free_x + summed])
    lead = xt.shape[: len(free_x)]
    blocks, _, size = w.q.shape if w.q.ndim == 3 else (1, *w.q.shape)
    rows = xt.reshape(math.prod(lead), blocks, size).astype(jnp.float32)
    xs = jnp.max(jnp.abs(rows), axis=2, keepdims=True) / 127.0
    xs = jnp.where(xs > 0, xs, 1.0)
    xq = jnp.round(rows / xs).astype(jnp.int8)
    if blocks == 1:  # one dot [M, K] · [N, K]ᵀ
        acc = jax.lax.dot_general(xq[:, 0], w.q, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32)
        y = acc.astype(jnp.float32) * xs[:, 0] * w.scale.astype(jnp.float32)[None, :]
    else:  # a dot per block [blocks, M, N], summed with the activation's block scales
        acc = jax.lax.dot_general(xq, w.q, (((2,), (2,)), ((1,), (0,))), preferred_element_type=jnp.int32)
        # elementwise and a sum over the blocks axis (major): one fusion (an einsum here
        # became transposes and a dot, as long as the int8 dots themselves)
        scales = jnp.transpose(xs[..., 0])[:, :, None] * w.scale.astype(jnp.float32)[:, None, :]
        y = jnp.sum(acc.astype(jnp.float32) * scales, axis=0)
    y = y.reshape(*lead, *(w.shape[i] for i, c in enumerate(rhs) if c in free_w))
    labels = free_x + free_w
    return jnp.transpose(y, [labels.index(c) for c in out]).astype(x.dtype)


def _embedder(module: Any, method: str, args: Any) -> Any:
    """The Embedder on an ``Int8Rows`` table (None: run the library's): ``encode`` takes its
    rows (times sqrt(D), as gemma's), ``decode`` is the int8 × int8 logits."""
    import jax.numpy as jnp

    if method not in ("encode", "decode") or not module.has_variable("params", "input_embedding"):
        return None
    table = module.get_variable("params", "input_embedding")
    if not isinstance(table, Int8Rows()):
        return None
    (x,) = args
    if method == "decode":
        return int8_einsum("...d,vd->...v", x, table)
    q = table.q if table.q.ndim == 2 else jnp.transpose(table.q, (1, 0, 2)).reshape(table.q.shape[1], -1)
    rows = (q[(x,)].astype(jnp.float32) * table.scale[(x,)].astype(jnp.float32)[..., None]).astype(table.dtype)
    return rows * jnp.sqrt(module.embed_dim).astype(rows.dtype)


def _interceptor(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
    import jax.numpy as jnp
    from gemma.gm.nn import _layers, _modules

    module = context.module
    if (context.method_name == "__call__" and isinstance(module, _layers.Einsum)
            and module.has_variable("params", module.weight_name)):
        w = module.get_variable("params", module.weight_name)
        if isinstance(w, Permuted()):
            eqn, x = args
            return jnp.einsum(permuted_eqn(eqn, w.perm), x, w.value)
        if isinstance(w, Int8Rows()):
            return int8_einsum(*args, w)
    elif isinstance(module, _modules.Embedder):
        out = _embedder(module, context.method_name, args)
        if out is not None:
            return out
    return next_fun(*args, **kwargs)


@functools.cache
def _layout_class(cls: type) -> type:
    from flax import linen as nn

    def __call__(self, *args, **kwargs):  # noqa: N807
        with nn.intercept_methods(_interceptor):
            return super(new_cls, self).__call__(*args, **kwargs)

    new_cls = type(f"{cls.__name__}DecodeLayout", (cls,), {
        "__call__": __call__, "__module__": cls.__module__, "_decode_layout": True})
    return new_cls


def with_decode_layout(model: Any) -> Any:
    """The same gemma Transformer, reading ``Permuted`` weights where its params hold them (a
    subclass: gemma's ``nn.jit`` keys traces on the module; inside the LoRA wrapper's
    interceptor, so a targeted einsum still gets its adapters)."""
    if getattr(type(model), "_decode_layout", False):
        return model
    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    return _layout_class(type(model))(**kwargs)


def decode_copy(loaded: Any) -> Any:
    """A ``LoadedModel`` in the decode layout (its model reads it)."""
    family = getattr(loaded, "family", "")
    if family not in FAMILIES:
        return loaded
    return dataclasses.replace(loaded, params=permute(loaded.params, loaded.config, family),
                               model=with_decode_layout(loaded.model))


def int8_copy(loaded: Any, float_dtype: Any) -> Any:
    """An int8 base's ``LoadedModel`` with its int8 leaves as ``Int8Rows`` (its model reads
    them; ``float_dtype``: what they stand for). Anything else comes back unchanged."""
    family = getattr(loaded, "family", "")
    if family not in FAMILIES:
        return loaded
    params = int8_rows(loaded.params, loaded.config, family, float_dtype)
    if params is loaded.params or not holds(params):
        return loaded
    return dataclasses.replace(loaded, params=params, model=with_decode_layout(loaded.model))
