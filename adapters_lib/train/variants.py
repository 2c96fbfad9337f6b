"""The gemma Transformer as the train step runs it: subclasses that change how, not what, it computes.

- ``with_remat(model)``: each block rematerialised in the backward pass;
- ``with_training_attention(model, kind)``: the attention without a cache computed as
  ``attention.KINDS`` says (block-sparse scores, or one fused ``dot_product_attention``),
  and each einsum's weight read when its layer runs (``_weight_at_use``);
- ``rebuild_as(model, cls)``: ``model``'s fields in a subclass (``lora`` retraces with it too).

Subclasses, not contexts around ``apply``: gemma's ``Transformer.__call__`` is an ``nn.jit``
keyed on the module, so an equal module would reuse a trace made without the change.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from adapters_lib.train import attention

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- remat


def _run_block(block: nn.Module, x: jax.Array, positions: jax.Array, mask: jax.Array) -> jax.Array:
    return block(x, positions, None, mask)[1]


_IN_REMAT: contextvars.ContextVar[bool] = contextvars.ContextVar("in_remat", default=False)


def _call_block(block: nn.Module, *args: Any) -> Any:
    token = _IN_REMAT.set(True)
    try:
        return block(*args)
    finally:
        _IN_REMAT.reset(token)


def _remat_blocks(next_fun, args, kwargs, context):
    """Gemma 4: each block's call rematerialised where the library's own loop makes it
    (per-layer inputs, KV-shared layers reading an earlier layer's k/v, the sliding mask)."""
    module = context.module
    if context.method_name != "__call__" or _IN_REMAT.get() or type(module).__name__ != "Block":
        return next_fun(*args, **kwargs)
    import inspect

    bound = inspect.signature(type(module).__call__).bind(module, *args, **kwargs)
    bound.apply_defaults()
    return nn.remat(_call_block)(module, *bound.args[1:])


@functools.cache
def _remat_class(cls: type) -> type:
    def _apply_attention(self, inputs, cache):
        if cache is not None:  # sampling with a KV cache: nothing to rematerialise
            return super(new_cls, self)._apply_attention(inputs, cache)
        if hasattr(inputs, "per_layer_inputs"):  # Gemma 4: the library's own loop
            with nn.intercept_methods(_remat_blocks):
                return super(new_cls, self)._apply_attention(inputs, cache)
        run = nn.remat(_run_block)
        x = inputs.embeddings
        for block in self.blocks:
            x = run(block, x, inputs.positions, inputs.attention_mask)
        return self.final_norm(x), {}

    new_cls = type(f"{cls.__name__}Remat", (cls,), {
        "_apply_attention": _apply_attention, "__module__": cls.__module__})
    return new_cls


def with_remat(model: nn.Module) -> nn.Module:
    """The same gemma Transformer, each block rematerialised in the backward pass."""
    if not hasattr(type(model), "_apply_attention"):
        log.warning("remat: %s has no _apply_attention (not a gm.nn.Transformer); "
                    "training without remat", type(model).__name__)
        return model
    return rebuild_as(model, _remat_class(type(model)))


def rebuild_as(model: nn.Module, cls: type) -> nn.Module:
    """``model``'s fields in a (subclass) ``cls``: a module that traces apart from ``model``."""
    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    return cls(**kwargs)


@functools.cache
def _attention_class(cls: type, kind: str, mesh: Any = None, weight_barrier: bool = True,
                     slot_major: bool = False) -> type:
    def _apply_attention(self, inputs, cache):
        if cache is not None:  # sampling: gemma's own attention
            return super(new_cls, self)._apply_attention(inputs, cache)
        with contextlib.ExitStack() as stack:
            stack.enter_context(attention.training_attention(kind, mesh))
            if weight_barrier:
                stack.enter_context(nn.intercept_methods(_weight_at_use))
            if slot_major:
                stack.enter_context(nn.intercept_methods(slot_major_mlp))
            return super(new_cls, self)._apply_attention(inputs, cache)

    suffix = {"blocked": "Blocked", "splash": "Splash"}.get(kind, f"Fused{kind.capitalize()}")
    suffix += "SlotMajor" if slot_major else ""
    new_cls = type(f"{cls.__name__}{suffix}", (cls,), {
        "_apply_attention": _apply_attention, "__module__": cls.__module__})
    return new_cls


def slot_major_mlp(next_fun, args, kwargs, context):
    """gemma's (Gemma 2/3) ``FeedForward`` with gate and up as the major axis of their einsum's
    output (``...F,NHF->N...H``: ``[2, B, T, F]``) instead of gemma's ``[B, T, 2, F]``; the same
    weights and arithmetic. gemma's layout puts a size-2 axis among the minor dims, which
    XLA:TPU relays out in copies (forward, LoRA's add, the backward's sum of the two slots'
    gradients): 31 % of its cost model's estimate for the Gemma-3-1B step; the v5e ran that step
    in 0.324 s instead of 0.372 (BENCHMARKS.md, "TPU v5e"). An intercepted ``__call__``,
    gemma's code with that one layout changed (tests/test_slot_major_mlp.py holds it to gemma's)."""
    from gemma.gm.nn import _layers, _modules

    module = context.module
    if context.method_name != "__call__" or type(module) is not _modules.FeedForward:
        return next_fun(*args, **kwargs)
    (x,) = args
    if module.transpose_gating_einsum:
        eq, shape = "...F,NHF->N...H", (2, module.hidden_dim, module.features)
    else:
        eq, shape = "...F,NFH->N...H", (2, module.features, module.hidden_dim)
    gating = _layers.Einsum(shape=shape, weight_name="gating_einsum")
    nn.share_scope(module, gating)
    gate, up = gating(eq, x)  # an array [2, ...] (plain einsum) or a tuple (lora.SLOT_MAJOR)
    activations = nn.gelu(gate) * up
    linear = _layers.Einsum(shape=(module.hidden_dim, module.features), weight_name="linear")
    nn.share_scope(module, linear)
    return linear("...H,HF->...F", activations)


def _weight_at_use(next_fun, args, kwargs, context):
    """A gemma ``Einsum``'s float weight tied to its input by an ``optimization_barrier``: XLA
    cannot transform it (the transposed copy its dot reads) before the layer runs. Without it
    XLA:CPU made every layer's transposed MLP weight at the start of the step, all live at once
    (Gemma-3-1B shape, batch 2×256, remat: 26 × 30 MiB of the step's 974 MiB of temporaries).
    A quantized weight has its own (``models.quantize``)."""
    module = context.module
    from adapters_lib.models.gemma_layers import einsum_classes

    if context.method_name != "__call__" or not isinstance(module, einsum_classes()) or len(args) != 2:
        return next_fun(*args, **kwargs)
    name = getattr(module, "weight_name", None)
    w = module.get_variable("params", name) if name and module.has_variable("params", name) else None
    if not isinstance(w, jax.Array) or getattr(module, "w_scale", None) is not None:
        return next_fun(*args, **kwargs)  # QArray, the init trace, Gemma 4's scaled einsums
    eqn, x = args
    x, w = jax.lax.optimization_barrier((x, w))
    return jnp.einsum(eqn, x, w)


def with_training_attention(model: nn.Module, kind: str = "blocked", mesh: Any = None,
                            weight_barrier: bool | None = None, slot_major: bool | None = None) -> nn.Module:
    """The same gemma Transformer whose training attention is ``kind`` (``attention.KINDS``):
    block-sparse scores, the splash kernel (on ``mesh``'s devices), or one fused
    ``dot_product_attention`` (xla or cudnn).

    ``weight_barrier``: tie each einsum's weight to its input (``_weight_at_use``); default on
    a CPU only, where XLA otherwise hoists every layer's transposed weight to the step's start.
    XLA:TPU assigns the dots' layouts itself, and the barrier would only keep it from fusing.
    ``slot_major``: the feed-forward's gate/up output slot-major (``slot_major_mlp``); default
    on a TPU only.

    A subclass, not a context around ``apply``: gemma's ``Transformer.__call__`` is an
    ``nn.jit`` keyed on the module, so an equal module would reuse a dense trace.
    """
    if not hasattr(type(model), "_apply_attention"):
        return model
    platform = mesh.devices.flat[0].platform if mesh is not None else jax.devices()[0].platform
    if weight_barrier is None:
        weight_barrier = platform == "cpu"
    if slot_major is None:
        slot_major = platform == "tpu"
    return rebuild_as(model, _attention_class(type(model), kind, mesh, weight_barrier, slot_major))


def with_blocked_attention(model: nn.Module) -> nn.Module:
    """``with_training_attention(model, "blocked")``."""
    return with_training_attention(model, "blocked")
