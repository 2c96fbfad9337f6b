"""The quantized frozen base (``[model] quantize``): weight-only, tiled scales, over qwix.

``quantize = "int8" | "int4" | "nf4"`` holds the base's projection weights as qwix
``QArray`` leaves (``qvalue`` in the narrow type, ``scale`` in the param dtype) in the params
tree itself, on the device, sharded like the weight they replace. What is quantized:

==================  =================================  ===============================
weight              contracted axis (tiled)            one scale per
==================  =================================  ===============================
``q_einsum``        D of (N, D, H)                     head × H × tile of D
``kv_einsum``       D of (2, K, D, H)                  k/v × head × H × tile of D
``qkv_einsum``      D of (3, N, D, H)                  q/k/v × head × H × tile of D
``attn_vec_einsum`` H of (N, H, D)                     head × D × tile of H
``gating_einsum``   D of (2, F, D) (or (2, D, F))      gate/up × F × tile of D
``linear``          F of (F, D)                        D × tile of F
==================  =================================  ===============================

The tied embedding / logits table, the norms and everything else stay in the param dtype
(the table is read as a gather and as the output projection, and it sets the dtype of the
sampler's KV cache; ``train.param_dtype = "bfloat16"`` halves it; see docs/quantization.md). ``tile_size``
(``[model] quantize_tile_size``, default 64, bitsandbytes' NF4 block) must divide every
contracted axis; qwix's ``quantize`` does the arithmetic (absmax per tile, symmetric; nf4 is
qwix's NormalFloat table), ``dequantize`` the inverse.

The model sees it through ``with_quantized_base(model)``: a subclass whose calls intercept
gemma's ``Einsum`` layers (``flax.linen.intercept_methods``); an Einsum whose weight is a
``QArray`` computes ``einsum(x, dequantize(w))`` under ``jax.checkpoint``, so the backward
pass dequantizes again instead of keeping the float weight alive from the forward pass: the
float copy of one weight exists only while its own matmul runs. The params paths do not
change (LoRA adapters sit beside the weights as before, in f32/bf16; ``lora.py`` is
untouched) and nothing else in the tree does either: sampling, eval and the train step run the
same modules. Export never merges into these leaves (``export.merged`` loads the float base).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.models.quantize_layout import (  # noqa: F401 - this module's interface too
    BITS,
    DEFAULT_TILE,
    MODES,
    QUANTIZED,
    TILE_WHERE,
    WHERE,
    _names,
    arch_shapes,
    check,
    describe,
    held_bytes,
    quantized_bytes,
    tiled_axes,
)

# --------------------------------------------------------------------------- the params


def qtype(mode: str) -> Any:
    import jax.numpy as jnp

    return {"int8": jnp.int8, "int4": jnp.int4, "nf4": "nf4"}[mode]


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


def qarray_sharding(weight_sharding: Any, shape: tuple[int, ...], axes: dict[int, int],
                    mode: str) -> Any:
    """The QArray's shardings: qvalue like the weight, its scale on the same mesh axes where
    the scale's dims still divide (else replicated on that dim)."""
    import qwix
    from jax.sharding import NamedSharding, PartitionSpec

    if not isinstance(weight_sharding, NamedSharding):
        return None
    spec = tuple(weight_sharding.spec) + (None,) * (len(shape) - len(weight_sharding.spec))
    sizes = dict(weight_sharding.mesh.shape)
    scale_shape = [shape[a] // axes[a] if a in axes else shape[a] for a in range(len(shape))]
    scale_spec = []
    for dim, axis in zip(scale_shape, spec, strict=True):
        names = (axis,) if isinstance(axis, str) else tuple(axis or ())
        size = math.prod(sizes[a] for a in names) if names else 1
        scale_spec.append(axis if names and dim % size == 0 else None)
    scale = NamedSharding(weight_sharding.mesh, PartitionSpec(*scale_spec))
    return qwix.QArray(qvalue=weight_sharding, scale=scale, zero_point=None, qtype=qtype(mode))


def quantize_params(params: Any, mode: str, tile: int = DEFAULT_TILE, *, config: Any = None,
                    donate: bool = False) -> Any:
    """The base tree with its projection weights as ``QArray`` (see the module doc).

    Leaf by leaf: each float weight is quantized where it lies (same sharding); with
    ``donate`` (the loader's own arrays) it is deleted at once, so the device holds the float
    base plus one quantized weight at most. ``mode = "none"``
    returns ``params``.
    """
    import jax

    if mode not in QUANTIZED:
        return params
    transpose = bool(getattr(config, "transpose_gating_einsum", True))
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    check(mode, tile, {_names(p): tuple(x.shape) for p, x in flat}, transpose_gating=transpose)

    def one(path, x):
        names = _names(path)
        axes = tiled_axes(names, tuple(x.shape), tile, transpose_gating=transpose)
        if axes is None:
            return x
        sharding = getattr(x, "sharding", None)
        out = qarray_sharding(sharding, tuple(x.shape), axes, mode)
        q = _quantizer(mode, tuple(sorted(axes.items())), x.ndim, out)(x)
        if donate:
            _delete(x)
        return q

    return jax.tree_util.tree_map_with_path(one, params)


def _delete(x: Any) -> None:
    try:
        x.delete()
    except (AttributeError, RuntimeError, ValueError):
        pass


def is_quantized(params: Any) -> bool:
    import jax
    import qwix

    return any(isinstance(x, qwix.QArray)
               for x in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, qwix.QArray)))


def dequantize_params(params: Any, dtype: Any = None) -> Any:
    """Every QArray leaf back to a float array (``dtype``, default the scale's)."""
    import jax
    import qwix

    def one(x):
        if isinstance(x, qwix.QArray):
            y = qwix.dequantize(x)
            return y.astype(dtype) if dtype is not None else y
        return x

    return jax.tree.map(one, params, is_leaf=lambda x: isinstance(x, qwix.QArray))


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
    import qwix

    def run(x, w):
        dense = qwix.dequantize(w).astype(x.dtype)
        return jnp.einsum(eqn, x, dense if w_scale is None else dense * w_scale)

    return jax.checkpoint(run, policy=jax.checkpoint_policies.nothing_saveable)(x, w)


@functools.cache
def _einsum_classes() -> tuple[type, ...]:
    """gemma's Einsum layers: Gemma 2/3's and Gemma 4's own (which also has ``w_scale``)."""
    from gemma.gm.nn import _layers

    classes: list[type] = [_layers.Einsum]
    try:
        from gemma.gm.nn.gemma4 import _layers as g4_layers

        classes.append(g4_layers.Einsum)
    except ImportError:
        pass
    return tuple(classes)


def _interceptor(next_fun, args, kwargs, context):
    import qwix

    module = context.module
    if (context.method_name == "__call__" and isinstance(module, _einsum_classes())
            and module.has_variable("params", module.weight_name)):
        w = module.get_variable("params", module.weight_name)
        if isinstance(w, qwix.QArray):
            eqn, x = args
            return _frozen_einsum(eqn, x, w, getattr(module, "w_scale", None))
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
    if mode == "gguf":
        raise WorkbenchError("model.quantize = \"gguf\" is not available in this build", where=WHERE,
                             hint='use "int8", "int4" or "nf4"')
    import dataclasses

    params = quantize_params(loaded.params, mode, spec.quantize_tile_size, config=loaded.config,
                             donate=True)
    return dataclasses.replace(loaded, params=params, model=with_quantized_base(loaded.model),
                               quantize=mode)
