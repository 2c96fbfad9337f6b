"""The adapters' shapes, traced from the wrapped model once per model and targets (at a probe
rank), and fresh adapters in them (``init_lora``; the values made on the host by ``lora.fresh``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from adapters_lib.config import LoraSpec
from adapters_lib.lora import family as lora_family
from adapters_lib.lora.fresh import init_adapters
from adapters_lib.lora.targeted import split_lora, wrap


def init_lora(model: nn.Module, spec: LoraSpec, base_params: Mapping[str, Any], rng: jax.Array,
              example_tokens: jax.Array | None = None) -> dict:
    """Fresh adapter params for ``model`` (the unwrapped Transformer) under ``spec``.

    Only the adapter params are created (the base weights are traced abstractly), so
    this is cheap even for big models.
    """
    del base_params, example_tokens
    return _adapter_init(model, dataclasses.replace(spec, enabled=True))(rng)


@functools.lru_cache(maxsize=32)
def _adapter_init(model: nn.Module, spec: LoraSpec):
    """An ``rng -> adapters`` for (model, spec), made once.

    The wrapped model is traced abstractly for the adapter shapes (no base weights made),
    then each adapter is made on the host (``lora.fresh``): A as flax's kaiming-uniform, B
    zeros (so step 0 equals the base model); no program compiled.
    """
    leaves, tree = _adapter_shapes(model, spec)
    return functools.partial(init_adapters, leaves, tree, jnp.dtype(spec.dtype),
                             is_b=lambda name: name.endswith("_b"))


PROBE_RANK = 7919
"""The rank the model is traced at for its adapter shapes (a prime no model dimension is):
each adapter leaf's axis of that size is its rank axis, so one trace serves every rank."""


@functools.lru_cache(maxsize=32)
def _adapter_shapes(model: nn.Module, spec: LoraSpec):
    """The adapters' ``(path, shape)`` leaves and tree for (model, spec). The model is traced
    once (at ``PROBE_RANK``, with every target of the family: ~1-2 s for the 270M, on a TPU
    host too); a rank tweak only renames that axis, a targets tweak keeps its targets' leaves
    (``lora.family.subset``). A leaf without exactly one such axis (a model whose adapter
    shapes are not linear in the rank) is traced at the rank itself."""
    probe = dataclasses.replace(spec, rank=PROBE_RANK, alpha=1.0, dtype="float32", enabled=True)
    every = dataclasses.replace(probe, targets=lora_family.family_targets(probe))
    got = lora_family.subset(_traced_shapes(model, every)[0], probe.targets) \
        if set(probe.targets) <= set(every.targets) else None
    leaves, tree = got if got is not None else _traced_shapes(model, probe)

    def at_rank(x: Any) -> Any:
        return jax.ShapeDtypeStruct(tuple(spec.rank if d == PROBE_RANK else d for d in x.shape), x.dtype)

    linear = all(sum(d == PROBE_RANK for d in x.shape) == 1
                 and all(d == PROBE_RANK or d % PROBE_RANK for d in x.shape) for _, x in leaves)
    if not linear:
        return _traced_shapes(model, dataclasses.replace(spec, alpha=1.0, dtype="float32", enabled=True))
    return [(path, at_rank(x)) for path, x in leaves], tree


@functools.lru_cache(maxsize=32)
def _traced_shapes(model: nn.Module, spec: LoraSpec):
    from adapters_lib import program_store

    def make() -> Any:
        wrapped = wrap(model, spec)
        tokens = jnp.zeros((1, 4), jnp.int32)
        abstract = jax.eval_shape(lambda r: wrapped.init(r, tokens)["params"], jax.random.key(0))
        return split_lora(abstract)[1]

    # a new engine reads the shapes back (the store, on in the engine) instead of tracing the model
    key = (type(model).__module__, type(model).__qualname__, repr(model), repr(spec))
    return jax.tree_util.tree_flatten_with_path(program_store.remembered_shapes("adapter-shapes", key, make))


def adapter_shapes(model: nn.Module, spec: LoraSpec) -> Any:
    """The adapter tree ``init_lora`` makes for (model, spec), abstract (ShapeDtypeStructs)."""
    leaves, tree = _adapter_shapes(model, dataclasses.replace(spec, enabled=True))
    dtype = jnp.dtype(spec.dtype)
    return jax.tree.unflatten(tree, [jax.ShapeDtypeStruct(tuple(x.shape), dtype) for _, x in leaves])
