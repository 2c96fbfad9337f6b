"""The quantized frozen base (``[model] quantize``): weight-only, tiled scales, over qwix.

``quantize = "int8" | "int4" | "nf4"`` holds the base's weights as qwix ``QArray`` leaves
(``qvalue`` in the narrow type, ``scale`` in the param dtype) in the params tree itself, on
the device, sharded like the weight they replace. What is quantized (``quantize_layout``):

=========================  ==================================  ===========================
weight                     tiled axis (one scale per tile)      channelwise
=========================  ==================================  ===========================
``q_einsum``/``k_einsum``  D of (N, D, H)                       head × H
``kv_einsum``              D of (2, K, D, H)                    k/v × head × H
``qkv_einsum``             D of (3, N, D, H)                    q/k/v × head × H
``attn_vec_einsum``        H of (N, H, D)                       head × D
``gating_einsum``          D of (2, F, D) (or (2, D, F))        gate/up × F
``linear``                 F of (F, D)                          D
expert bank gating         D of (E, 2, X, D) (Gemma 4 MoE)      expert × gate/up × X
expert bank linear         X of (E, X, D)                       expert × D
``input_embedding``        D of (V, D): the embedding/logits    one row each
``per_layer_embeddings``   P of (V, layers, P) (Gemma 4 E)      row × layer
=========================  ==================================  ===========================

Norms, the MoE router and per-expert scales stay in the param dtype. ``tile_size``
(``[model] quantize_tile_size``, default 64, bitsandbytes' NF4 block) must divide every tiled
axis; qwix's ``quantize`` does the arithmetic (absmax per tile, symmetric; nf4 is qwix's
NormalFloat table). ``quantize = "gguf"`` keeps a GGUF's own blocks instead
(``quantize_gguf``).

The model sees it through ``with_quantized_base(model)``: a subclass whose calls intercept
(``flax.linen.intercept_methods``)
- gemma's ``Einsum`` layers: an Einsum whose weight is quantized computes
  ``einsum(x, dequantize(w))`` under ``jax.checkpoint``, so the backward pass dequantizes
  again instead of keeping the float weight alive from the forward pass, and the weight
  passes an ``optimization_barrier`` with ``x`` first, so the dequantized copy is made when
  the layer runs (one layer's float weight live at a time);
- the ``Embedder``: ``encode`` gathers the rows of the qvalues and scales and dequantizes
  those only, ``decode`` (the logits) and the train step's chunked cross-entropy read the
  table a block of rows at a time (``qarray``): its float copy never exists whole;
- a MoE expert bank's weights (``jax.lax.ragged_dot`` takes them as plain arrays): the bank of
  one layer is dequantized when that layer runs.
The params paths do not change (LoRA adapters sit beside the weights as before, in
f32/bf16; the ``lora`` modules are untouched): sampling, eval and the train step run the same modules.
Export never merges into these leaves (``export.merged`` loads the float base).
"""

from __future__ import annotations

import functools
from typing import Any

from adapters_lib.models.gemma_layers import (
    bank_weight_classes,
    einsum_classes,
    embedder_classes,
    qtype,
)
from adapters_lib.models.quantize.quantize_layout import (
    BITS,
    DEFAULT_TILE,
    QUANTIZED,
    _names,
    check,
    mode_of,
    tiled_axes,
)

# --------------------------------------------------------------------------- the params


@functools.lru_cache(maxsize=64)
def _quantizer(mode: str, axes: tuple[tuple[int, int], ...], ndim: int, out_sharding: Any):
    """A jitted ``float weight -> QArray`` for one layout (qwix's ``quantize``)."""
    import jax
    import qwix

    tiled = dict(axes)
    channelwise = tuple(a for a in range(ndim) if a not in tiled)
    kw = {} if out_sharding is None else {"out_shardings": out_sharding}
    return jax.jit(lambda w: qwix.quantize(w, qtype(mode), channelwise_axes=channelwise,
                                           tiled_axes=tiled), **kw)


@functools.lru_cache(maxsize=16)
def _packer(out_sharding: Any):
    """A jitted ``4-bit QArray -> PackedQArray`` (``qarray.pack``), its parts placed like the
    QArray's (a ``[V, D]`` sharding reads the same on ``[V, D/2]``)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    if out_sharding is None:
        return jax.jit(qarray.pack)
    nibbles = jnp.dtype(jnp.int4 if out_sharding.qtype == jnp.int4 else jnp.uint4)  # nf4: uint4
    packed = qarray.PackedQArray(qvalue=out_sharding.qvalue, scale=out_sharding.scale, zero_point=None,
                                 qtype=out_sharding.qtype, bias=None, float_dtype=None, nibbles=nibbles)
    return jax.jit(qarray.pack, out_shardings=packed)


def qarray_sharding(weight_sharding: Any, shape: tuple[int, ...], axes: dict[int, int],
                    mode: str) -> Any:
    """The QArray's shardings: qvalue like the weight, its scale by ``scale_sharding``."""
    import qwix
    from jax.sharding import NamedSharding

    if not isinstance(weight_sharding, NamedSharding):
        return None
    from adapters_lib.models.quantize.qarray import scale_sharding

    return qwix.QArray(qvalue=weight_sharding, scale=scale_sharding(weight_sharding, shape, axes),
                       zero_point=None, qtype=qtype(mode))


def quantize_params(params: Any, mode: str, tile: int = DEFAULT_TILE, *, config: Any = None,
                    donate: bool = False, table: str = "auto", gptq: Any = None) -> Any:
    """The base tree with its weights as ``QArray`` (see the module doc); the embedding
    tables as ``table`` says (``[model] quantize_embedding``: "auto" = like the rest).
    ``gptq`` (``quantize_gptq.held_leaves``: path → host qvalue and scale): the leaves it names
    are held as GPTQ rounded them (``[model] quantize_method = "gptq"``), the rest to nearest.

    Leaf by leaf: each float weight is quantized where it lies (same sharding); with
    ``donate`` (the loader's own arrays) it is deleted at once, so the device holds the float
    base plus one quantized weight at most. ``mode = "none"``
    returns ``params``.
    """
    import jax

    from adapters_lib.models.quantize import quantize_gptq

    if mode not in QUANTIZED:
        return params
    transpose = bool(getattr(config, "transpose_gating_einsum", True))
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    check(mode, tile, {_names(p): tuple(x.shape) for p, x in flat}, transpose_gating=transpose,
          table=table)

    def one(path, x):
        names = _names(path)
        held = mode_of(names, mode, table)
        axes = tiled_axes(names, tuple(x.shape), tile, transpose_gating=transpose) \
            if held in QUANTIZED else None
        if axes is None:
            return x
        sharding = getattr(x, "sharding", None)
        out = qarray_sharding(sharding, tuple(x.shape), axes, held)
        if gptq and names in gptq:
            q = quantize_gptq.as_qarray(gptq[names], held, x.dtype)
            q = jax.device_put(q, out) if out is not None else q
        else:
            q = _quantizer(held, tuple(sorted(axes.items())), x.ndim, out)(x)
        if donate:
            _delete(x)
        if names[0] == "embedder" and BITS[held] == 4:  # sliced by row blocks: held as bytes
            q = _packer(out)(q)
        return q

    return jax.tree_util.tree_map_with_path(one, params)


def _delete(x: Any) -> None:
    try:
        x.delete()
    except (AttributeError, RuntimeError, ValueError):
        pass


def is_quantized(params: Any) -> bool:
    import jax

    from adapters_lib.models.quantize import qarray

    return any(qarray.is_qarray(x) for x in jax.tree.leaves(params, is_leaf=qarray.is_qarray))


def dequantize_params(params: Any, dtype: Any = None) -> Any:
    """Every quantized leaf back to a float array (``dtype``, default the one it stands for)."""
    import jax

    from adapters_lib.models.quantize import qarray

    return jax.tree.map(lambda x: qarray.dequantize(x, dtype) if qarray.is_qarray(x) else x,
                        params, is_leaf=qarray.is_qarray)


def device_bytes(tree: Any) -> int:
    """Bytes the device reports for a tree's buffers (``on_device_size_in_bytes`` of each
    shard: packed int4 counts what XLA really allocates, not ``nbytes``)."""
    import jax

    total = 0
    for x in jax.tree.leaves(tree):
        for shard in getattr(x, "addressable_shards", ()):
            total += int(shard.data.on_device_size_in_bytes())
    return total


# --------------------------------------------------------------------------- the model


def _frozen_einsum(eqn: str, x: Any, w: Any, w_scale: float | None = None) -> Any:
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    def run(x, w):
        # tied to the activation: XLA may not dequantize before the layer's input exists (it
        # scheduled every layer's forward dequantization at the start of the step, all live
        # at once: 1.2 GiB of the Gemma-3-1B shape's int4 step)
        x, w = jax.lax.optimization_barrier((x, w))
        dense = qarray.dequantize(w, x.dtype)
        return jnp.einsum(eqn, x, dense if w_scale is None else dense * w_scale)

    return jax.checkpoint(run, policy=jax.checkpoint_policies.nothing_saveable)(x, w)


def _param(module: Any, name: str) -> Any:
    return module.get_variable("params", name) if module.has_variable("params", name) else None


def _embedder_call(module: Any, method: str, args: tuple, kwargs: dict) -> Any:
    """The Embedder's methods on a quantized table (None: not quantized, run the library's)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray

    if method in ("encode", "decode"):
        table = _param(module, "input_embedding")
        if not qarray.is_qarray(table):
            return None
        (x,) = args
        if method == "encode":
            rows = qarray.take_rows(table, x)
            return rows * jnp.sqrt(module.embed_dim).astype(rows.dtype)
        dt = jnp.result_type(x.dtype, table.dtype)
        return qarray.vocab_logits(x.astype(dt), table, out_dtype=dt)
    if method == "encode_per_layer_input":  # Gemma 4's, its lines with the rows dequantized
        table = _param(module, "per_layer_embeddings")
        if not qarray.is_qarray(table):
            return None
        x, t = args[:2]
        ignore = kwargs.get("ignore_ple_tokens", args[2] if len(args) > 2 else False)
        t = jnp.where(jnp.logical_and(t >= 0, t < module.vocab_size), t, jnp.zeros_like(t))
        x = module.per_layer_model_projection("...td,dnp->...tnp", x)
        x = module.per_layer_projection_norm(x)
        if ignore:
            return x
        y = qarray.take_rows(table, t)
        y = y * jnp.sqrt(module.per_layer_input_dim).astype(y.dtype)
        return (x + y) * jax.lax.rsqrt(2.0).astype(x.dtype)
    return None


def _embedder_setup(module: Any, next_fun, args: tuple, kwargs: dict) -> Any:
    """The Embedder's ``setup`` with its 4-bit tables held as bytes (``qarray.PackedQArray``):
    ``self.param`` of such a table returns it as it is. flax checks an existing param's shape
    against the initializer's by its first leaf, here ``[V, D/2]`` bytes for ``[V, D]``."""
    from adapters_lib.models.quantize import qarray

    packed = {n for n in ("input_embedding", "per_layer_embeddings")
              if isinstance(_param(module, n), qarray.PackedQArray)}
    if not packed:
        return next_fun(*args, **kwargs)
    library_param = module.param

    def param(name, *a, **k):
        return module.get_variable("params", name) if name in packed else library_param(name, *a, **k)

    object.__setattr__(module, "param", param)  # the instance's, for this setup only
    try:
        return next_fun(*args, **kwargs)
    finally:
        object.__delattr__(module, "param")


def _interceptor(next_fun, args, kwargs, context):
    from adapters_lib.models.quantize import qarray

    module, method = context.module, context.method_name
    if method == "__call__" and isinstance(module, einsum_classes()):
        w = _param(module, module.weight_name)
        if qarray.is_qarray(w):
            eqn, x = args
            return _frozen_einsum(eqn, x, w, getattr(module, "w_scale", None))
    elif method == "__call__" and isinstance(module, bank_weight_classes()):
        w = _param(module, module.weight_name)
        if qarray.is_qarray(w):  # the layer's bank, dequantized while it runs
            return qarray.dequantize(w)
    elif method == "setup" and isinstance(module, embedder_classes()):
        return _embedder_setup(module, next_fun, args, kwargs)
    elif isinstance(module, embedder_classes()):
        out = _embedder_call(module, method, args, kwargs)
        if out is not None:
            return out
    return next_fun(*args, **kwargs)


@functools.cache
def _quantized_class(cls: type) -> type:
    from flax import linen as nn

    def __call__(self, *args, **kwargs):  # noqa: N807
        with nn.intercept_methods(_interceptor):
            return super(new_cls, self).__call__(*args, **kwargs)

    new_cls = type(f"{cls.__name__}QuantizedBase", (cls,), {
        "__call__": __call__, "__module__": cls.__module__, "_quantized_base": True})
    return new_cls


def with_quantized_base(model: Any) -> Any:
    """The same gemma Transformer, reading ``QArray`` weights where its params hold them
    (a subclass: gemma's ``nn.jit`` keys traces on the module, see ``train.variants``)."""
    import dataclasses

    if getattr(type(model), "_quantized_base", False):
        return model
    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    return _quantized_class(type(model))(**kwargs)


def quantize_loaded(loaded: Any, spec: Any) -> Any:
    """A ``LoadedModel`` with its base held as ``spec.quantize`` (model and params)."""
    mode = spec.quantize
    import dataclasses

    gptq = None
    if spec.quantize_method == "gptq":  # from the float base, before it is quantized
        from adapters_lib.models.quantize import quantize_gptq

        gptq = quantize_gptq.held_leaves(loaded, spec)
    params = quantize_params(loaded.params, mode, spec.quantize_tile_size, config=loaded.config,
                             donate=True, table=spec.quantize_embedding, gptq=gptq)
    return dataclasses.replace(loaded, params=params, model=with_quantized_base(loaded.model),
                               quantize=mode)
