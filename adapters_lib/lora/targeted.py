"""Targeted LoRA for gemma models, through ``gemma.peft.ModuleInterceptor``.

``gm.nn.LoRA`` adapts every einsum and has no alpha. Here only the chosen targets get an
adapter (``lora.einsum``: the adapted einsum and its layouts, target by target), and the update
is scaled by ``alpha / rank``.

Adapter params live beside the weight they adapt, under a key starting with ``lora``:
``layer_0/attn/q_einsum/lora/{q_a,q_b}``, ``layer_0/mlp/lora_gating_einsum/{gate_a,...}``.
``split_lora``/``merge_lora`` separate and rejoin them; ``fuse_lora`` folds them into the
base weights (``W += scale · A·B`` per layout; in numpy, ``lora/fuse.py``), which gemma's
``peft.fuse_params`` does not do.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from gemma import peft

from adapters_lib.config import LoraSpec
from adapters_lib.lora.einsum import TargetedLoRAEinsum
from adapters_lib.lora.fuse import (
    _EINSUM_TARGETS,
    LORA_PREFIX,
    _is_lora_key,
)
from adapters_lib.models import families


def _einsum_kind(module: nn.Module) -> str | None:
    """Which gemma weight an Einsum module holds (attention einsums are all named ``w``)."""
    if module.weight_name != "w":
        return module.weight_name if module.weight_name in _EINSUM_TARGETS else None
    return module.name if module.name in _EINSUM_TARGETS else None


def _wrapper_name(module: nn.Module) -> str:
    # FeedForward shares its scope between gating_einsum and linear: give each wrapper
    # its own name so the two do not collide (the same trick as gm.nn.LoRA).
    return LORA_PREFIX if module.weight_name == "w" else f"{LORA_PREFIX}_{module.weight_name}"


def _layer_of(module: nn.Module) -> int | None:
    """The ``layer_N`` index a bound module sits in (None outside the blocks)."""
    scope = getattr(module, "scope", None)
    for name in getattr(scope, "path", ()) or ():
        if isinstance(name, str) and name.startswith("layer_") and name[6:].isdigit():
            return int(name[6:])
    return None


def _replace_fn(spec: LoraSpec, kv_shared: frozenset[int] = frozenset()):
    """``kv_shared``: layers that reuse an earlier layer's k/v (their own k/v projections are
    computed and thrown away: an adapter there would never get a gradient, so none goes there)."""
    dtype = jnp.dtype(spec.dtype)
    einsums = families.layer_types("einsum")  # the family table's einsum classes

    def replace(module: nn.Module) -> nn.Module:
        if not isinstance(module, einsums):
            return module
        kind = _einsum_kind(module)
        if kind is None:
            return module
        chosen = tuple(t for t in _EINSUM_TARGETS[kind] if t in spec.targets)
        if kind in ("kv_einsum", "k_einsum") and kv_shared and _layer_of(module) in kv_shared:
            chosen = ()
        if not chosen:
            return module
        return TargetedLoRAEinsum(
            name=_wrapper_name(module), wrapped=module, kind=kind, targets=chosen,
            rank=spec.rank, scale=spec.scale, dtype=dtype,
        )

    return replace


class _CallInterceptor(peft.ModuleInterceptor):
    """gemma's interceptor, letting ``setup`` through: a setup-style module (the MoE expert
    bank) is replaced at its first call, after its own submodules exist."""

    def interceptor(self, next_fun, args, kwargs, context):
        if context.method_name == "setup":
            return next_fun(*args, **kwargs)
        return super().interceptor(next_fun, args, kwargs, context)


class LoRAModel(nn.Module):
    """Wraps a gemma Transformer so that only ``spec.targets`` carry adapters.

    Transparent to the params tree (shares its scope with the wrapped model), like
    ``gm.nn.LoRA``, so base params keep their checkpoint paths.
    """

    model: nn.Module
    spec: LoraSpec

    def __post_init__(self):
        super().__post_init__()
        if self.scope is not None:
            nn.share_scope(self, self.model)

    @nn.compact
    def __call__(self, *args, **kwargs):
        with contextlib.ExitStack() as stack:
            banks = families.layer_types("moe")  # expert banks: the ``experts`` target
            if banks and "experts" in self.spec.targets:
                from adapters_lib.lora import experts as lora_experts

                stack.enter_context(nn.intercept_methods(lora_experts.interceptor(
                    banks, rank=self.spec.rank, scale=self.spec.scale, dtype=jnp.dtype(self.spec.dtype))))
            stack.enter_context(_CallInterceptor(_replace_fn(self.spec, kv_shared_layers(self.model.config))))
            return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


@functools.cache
def _traced_class(cls: type, spec: LoraSpec) -> type:
    # gemma's Transformer.__call__ is an ``nn.jit`` keyed on the module (self is static):
    # a second trace of an equal module reuses the first, interceptor and all. A subclass
    # per LoRA spec keeps one trace per (model, spec) and never mixes two specs.
    tag = "_".join(spec.targets)
    return type(f"{cls.__name__}_LoRA_r{spec.rank}_{tag}", (cls,), {"__module__": cls.__module__})


def kv_shared_layers(config: Any) -> frozenset[int]:
    """Layers of a Gemma 4 config that reuse another layer's k/v (empty for other families)."""
    share = getattr(config, "kv_cache_sharing_config", None)
    if share is None:
        return frozenset()
    from adapters_lib.models.families.gemma4 import shared_kv_layers

    return frozenset(shared_kv_layers(tuple(config.attention_types), share.frac_shared_layers))


def _retrace(model: nn.Module, spec: LoraSpec) -> nn.Module:
    from adapters_lib.train.variants import rebuild_as

    return rebuild_as(model, _traced_class(type(model), spec))


def wrap(model: nn.Module, spec: LoraSpec) -> nn.Module:
    """The model to train: ``model`` itself for a full fine-tune, else a ``LoRAModel``."""
    return LoRAModel(model=_retrace(model, spec), spec=spec) if spec.enabled else model


# --------------------------------------------------------------------------- trees


def split_lora(params: Mapping[str, Any]) -> tuple[dict, dict]:
    """(base, adapters): two nested dicts; neither keeps empty branches."""
    base: dict = {}
    lora: dict = {}
    for key, value in params.items():
        if _is_lora_key(key):
            lora[key] = value
        elif isinstance(value, Mapping):
            b, a = split_lora(value)
            if b:
                base[key] = b
            if a:
                lora[key] = a
        else:
            base[key] = value
    return base, lora


def merge_lora(base: Mapping[str, Any], lora: Mapping[str, Any]) -> dict:
    """Inverse of ``split_lora``."""
    out = dict(base)
    for key, value in lora.items():
        if key in out and isinstance(out[key], Mapping) and not _is_lora_key(key):
            out[key] = merge_lora(out[key], value)
        else:
            out[key] = value
    return out


def count_params(tree: Any) -> int:
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(tree)))


def expected_lora_params(config: Any, spec: LoraSpec) -> int:
    """Closed-form adapter parameter count for a gemma ``TransformerConfig`` (``lora.shapes.lora_param_count``)."""
    from adapters_lib.lora.shapes import lora_param_count

    own = families.family_of_config(config).lora_shapes  # Gemma 4: its own table
    if own is not None:
        return int(sum(math.prod(s) for _, s in own(config, spec.rank, tuple(spec.targets))))
    return lora_param_count(config, spec.rank, tuple(spec.targets))
