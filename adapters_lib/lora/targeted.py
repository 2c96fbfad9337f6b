"""Targeted LoRA for gemma models, through ``gemma.peft.ModuleInterceptor``.

``gm.nn.LoRA`` adapts every einsum and has no alpha. Here only the chosen targets get an
adapter, each a pair of 2-D matrices in the PEFT convention (``A: in×r``, ``B: r×out``,
B zero-initialised so step 0 equals the base model), and the update is scaled by
``alpha / rank``. Targets map onto gemma's einsums:

======  ==========================================  ============================
target  gemma einsum (weight)                       slice
======  ==========================================  ============================
q       ``attn/q_einsum``  (N, D, H)                all; or ``qkv_einsum[0]``
k       ``attn/kv_einsum`` (2, K, D, H)             ``[0]``; or ``qkv_einsum[1]``
v       ``attn/kv_einsum``                          ``[1]``; or ``qkv_einsum[2]``
o       ``attn/attn_vec_einsum`` (N, H, D)          all
gate    ``mlp/gating_einsum`` (2, F, D) transposed  ``[0]``
up      ``mlp/gating_einsum``                       ``[1]``
down    ``mlp/linear`` (F, D)                       all
======  ==========================================  ============================

Adapter params live beside the weight they adapt, under a key starting with ``lora``:
``layer_0/attn/q_einsum/lora/{q_a,q_b}``, ``layer_0/mlp/lora_gating_einsum/{gate_a,...}``.
``split_lora``/``merge_lora`` separate and rejoin them; ``fuse_lora`` folds them into the
base weights (``W += scale · A·B`` per layout; in numpy, ``lora/fuse.py``), which gemma's
``peft.fuse_params`` does not do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from gemma import peft

from adapters_lib.config import LoraSpec
from adapters_lib.kernels.lora_matmul import lora_matmul, lora_matmul_slots
from adapters_lib.lora import family as lora_family
from adapters_lib.lora.fresh import init_adapters
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


def _slice_in_out(kind: str, shape: tuple[int, ...]) -> tuple[int, int, str]:
    """(in features, out features, layout) of one target slice of a weight."""
    if kind in ("q_einsum", "k_einsum"):  # N D H (K D H): x[BTD] → [BTNH]
        n, d, h = shape
        return d, n * h, "d_nh"
    if kind in ("kv_einsum", "qkv_einsum"):  # C K D H
        _, k, d, h = shape
        return d, k * h, "d_kh"
    if kind == "attn_vec_einsum":  # N H D: x[BTNH] → [BTD]
        n, h, d = shape
        return n * h, d, "nh_d"
    if kind == "gating_einsum":  # transposed (2, F, D) or (2, D, F)
        _, a, b = shape
        return min(a, b), max(a, b), "d_f"
    if kind == "linear":  # F D
        f, d = shape
        return f, d, "f_d"
    raise ValueError(kind)


def lora_in_out(kind: str, shape: tuple[int, ...], transpose_gating: bool = True) -> tuple[int, int]:
    """In/out features of the adapter for one target slice of a gemma weight."""
    if kind == "gating_einsum":
        _, a, b = shape
        f, d = (a, b) if transpose_gating else (b, a)
        return d, f
    fin, fout, _ = _slice_in_out(kind, shape)
    return fin, fout


SLOT_MAJOR = "->N...H"
"""The gate/up einsum asked for slot-major (``[2, ..., F]``), as the train step's feed-forward
does on a TPU (``train.variants.slot_major_mlp``; gemma's own output is ``...NH``,
``[..., 2, F]``): the adapted einsum then returns the slots as a tuple ``(gate, up)``, each
``x · W[c]`` plus its update, so no stacked array exists forward or backward."""


class TargetedLoRAEinsum(nn.Module):
    """A gemma ``Einsum`` plus scaled low-rank updates on some slices of its output."""

    wrapped: nn.Module
    """The library's einsum layer (a class the family table names for the ``einsum`` role)."""
    kind: str
    targets: tuple[str, ...]
    rank: int
    scale: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, eqn: str, x: jax.Array) -> jax.Array | tuple[jax.Array, ...]:
        slot_major = self.kind == "gating_einsum" and eqn.endswith(SLOT_MAJOR)
        w = self._float_weight() if slot_major else None
        if w is not None:  # each slot's product on its own: [..., F] each (see SLOT_MAJOR)
            one = eqn.replace("N", "")  # ...F,NHF->N...H → ...F,HF->...H
            y = [jnp.einsum(one, x, w[c]) for c in range(w.shape[0])]
        else:
            y = self.wrapped(eqn, x)
        shape = tuple(self.wrapped.shape)
        if self.kind == "gating_einsum":
            fin, fout = x.shape[-1], (y[0] if isinstance(y, list) else y).shape[-1]
        else:
            fin, fout, _ = _slice_in_out(self.kind, shape)
        pairs = []
        for target in self.targets:
            a = self.param(f"{target}_a", nn.initializers.kaiming_uniform(), (fin, self.rank), self.dtype)
            b = self.param(f"{target}_b", nn.initializers.zeros_init(), (self.rank, fout), self.dtype)
            pairs.append((_EINSUM_TARGETS[self.kind][target], a, b))
        if self.kind == "attn_vec_einsum":  # x: [..., N, H] → [..., N·H]
            x = x.reshape(*x.shape[:-2], shape[0] * shape[1])
        if slot_major:  # y: C × [..., F]; each adapted slot plus its own update
            dt = x.dtype
            deltas = lora_matmul_slots(x, jnp.concatenate([a.astype(dt) for _, a, _ in pairs], axis=1),
                                       tuple(b.astype(dt) for _, _, b in pairs), self.scale)
            out = list(y)
            for (slot, _, _), d in zip(pairs, deltas, strict=True):
                out[slot] = out[slot] + d.astype(out[slot].dtype)
            return tuple(out)
        return self._add(y, self._delta(x, pairs))

    def _float_weight(self) -> jax.Array | None:
        """The wrapped einsum's weight where it is a plain float array (not at init, not a
        quantized weight): then each gate/up slot is its own product."""
        name = getattr(self.wrapped, "weight_name", None)
        if not name or self.is_initializing() or not self.wrapped.has_variable("params", name):
            return None
        w = self.wrapped.get_variable("params", name)
        return w if isinstance(w, jax.Array) and jnp.issubdtype(w.dtype, jnp.floating) else None

    def _delta(self, x: jax.Array, pairs: list[tuple[int | None, jax.Array, jax.Array]]) -> jax.Array:
        """Every target's update in one low-rank product: ``[..., slots·out]``.

        Targets that share an einsum (k/v, gate/up) share one pass over ``x``: their A
        matrices are concatenated (``in × n·r``) and their B matrices placed block-diagonally
        in their output slots (``n·r × slots·out``), so the update lands in ``y``'s own
        layout with no stack or slice of the wide activations.
        """
        dt = x.dtype
        if len(pairs) == 1 and pairs[0][0] is None:
            _, a, b = pairs[0]
            return lora_matmul(x, a.astype(dt), b.astype(dt), self.scale)
        slots = _EINSUM_TARGETS[self.kind]
        n_slots = len(set(slots.values()))
        a_cat = jnp.concatenate([a.astype(dt) for _, a, _ in pairs], axis=1)
        rows = []
        for slot, _, b in pairs:
            zero = jnp.zeros(b.shape, dt)
            rows.append(jnp.concatenate([b.astype(dt) if s == slot else zero for s in range(n_slots)], axis=1))
        return lora_matmul(x, a_cat, jnp.concatenate(rows, axis=0), self.scale)

    def _add(self, y: jax.Array, delta: jax.Array) -> jax.Array:
        """``y`` plus the update, reshaped to ``y``'s layout (one elementwise add)."""
        shape = tuple(self.wrapped.shape)
        lead = delta.shape[:-1]
        if self.kind in ("q_einsum", "k_einsum"):  # y: B T N H
            return y + delta.reshape(*lead, shape[0], shape[2]).astype(y.dtype)
        if self.kind in ("kv_einsum", "qkv_einsum"):  # y: C B T K H
            d = delta.reshape(*lead, shape[0], shape[1], shape[3])
            return y + jnp.moveaxis(d, -3, 0).astype(y.dtype)
        if self.kind == "gating_einsum":  # y: ... C F
            return y + delta.reshape(*lead, y.shape[-2], y.shape[-1]).astype(y.dtype)
        return y + delta.astype(y.dtype)  # attn_vec_einsum, linear: ... D


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


def count_params(tree: Any) -> int:
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(tree)))


def expected_lora_params(config: Any, spec: LoraSpec) -> int:
    """Closed-form adapter parameter count for a gemma ``TransformerConfig`` (``lora.shapes.lora_param_count``)."""
    from adapters_lib.lora.shapes import lora_param_count

    own = families.family_of_config(config).lora_shapes  # Gemma 4: its own table
    if own is not None:
        return int(sum(math.prod(s) for _, s in own(config, spec.rank, tuple(spec.targets))))
    return lora_param_count(config, spec.rank, tuple(spec.targets))
