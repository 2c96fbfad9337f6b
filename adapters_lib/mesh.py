"""The named device mesh (``data``, ``fsdp``, ``tensor``), sharding rules, and validation.

- ``make_mesh(spec)`` builds a ``jax.sharding.Mesh`` with Auto axis types (``jax.make_mesh``
  defaults to Explicit, which breaks gemma's embedding lookup).
- ``param_partition(path, shape, sizes)`` is the logical rule for one gemma param (pure):
  vocab, heads, KV heads and the MLP hidden dim go on ``tensor``, the embedding dim on
  ``fsdp``; norms are replicated. A dim that an axis does not divide is replicated on that
  axis (``validate`` says so before launch). LoRA matrices follow the weight they adapt:
  ``A`` (in × r) is sharded like the base's input dim, ``B`` (r × out) like its output dim.
- ``validate(spec, config, batch_size, seq_len, device_count)`` (pure) lists the problems in
  words; ``check(...)`` raises a ``WorkbenchError`` for the errors.
- The batch is sharded on (``data``, ``fsdp``) along its first dim.

Nothing here imports jax at module level: the pure parts serve the TUI/CLI too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters_lib.config import MeshSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from adapters_lib.models.quantize import QARRAY_FIELDS

log = logging.getLogger(__name__)

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

Axis = str | None


# --------------------------------------------------------------------------- rules (pure)


def _key_name(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def path_names(path: Sequence[Any]) -> tuple[str, ...]:
    """A jax key path (or plain strings) as a tuple of names."""
    return tuple(_key_name(k) for k in path)


def _base_layout(kind: str, shape: tuple[int, ...], transpose_gating: bool) -> tuple[Axis, ...] | None:
    """Logical axes of a gemma base weight, by its kind and rank: the families' sharding tables
    (``Family.sharding``; None = not a known weight). The untransposed gating einsum
    (2, D, F: Gemma 2 2B) swaps its last two axes."""
    layout = _RULES.get((kind, len(shape)))
    if layout is not None and kind == "gating_einsum" and len(shape) == 3 and not transpose_gating:
        return (layout[0], layout[2], layout[1])
    return layout


_RULES = families.sharding_rules()

# LoRA matrix → (axis of its "in" dim for *_a, axis of its "out" dim for *_b), by the
# kind of weight it adapts (``Family.lora_axes``). Flattened (N·H) / (K·H) dims keep heads
# major, so sharding them on ``tensor`` puts whole heads on a device, like the base weight.
_LORA_AXES: dict[str, tuple[Axis, Axis]] = families.lora_axes()


_QARRAY_FIELDS = QARRAY_FIELDS
"""The children of a qwix ``QArray`` in a key path (``models.quantize``): each shards on
its weight's axes (a scale's dim that no longer divides stays replicated)."""


def _weight_kind(names: tuple[str, ...]) -> str:
    """The kind of weight a path names: its last meaningful key."""
    leaf = names[-1]
    if leaf == "w" and len(names) >= 2:
        return names[-2]
    return leaf


def _lora_kind(names: tuple[str, ...]) -> str | None:
    """For a LoRA leaf (``.../q_einsum/lora/q_a``, ``.../mlp/lora_linear/down_a``) the base kind."""
    for i, n in enumerate(names):
        if n == "lora" or n.startswith("lora_"):
            if n == "lora":
                return names[i - 1] if i >= 1 else None
            return n[len("lora_"):]
    return None


def logical_axes(path: Sequence[Any], shape: Sequence[int], *,
                 transpose_gating: bool = True) -> tuple[Axis, ...]:
    """The mesh axis each dim of a param would use if sizes divided (pure).

    Unknown params (norm scales, vision tower, ...) are replicated.
    """
    names = path_names(path)
    if len(names) > 1 and names[-1] in _QARRAY_FIELDS:  # a quantized weight's parts: its axes
        names = names[:-1]
    shape = tuple(int(s) for s in shape)
    lora_kind = _lora_kind(names)
    if lora_kind is not None:
        axes = _LORA_AXES.get(lora_kind)
        if axes is None or len(shape) != 2:
            return (None,) * len(shape)
        leaf = names[-1]
        if leaf.endswith("_a"):
            return (axes[0], None)
        if leaf.endswith("_b"):
            return (None, axes[1])
        return (None, None)
    layout = _base_layout(_weight_kind(names), shape, transpose_gating)
    return layout if layout is not None else (None,) * len(shape)


def heads_of(config: Any) -> dict[str, int]:
    """Heads per attention weight kind, from a gemma config (for LoRA's flattened head dims)."""
    if config is None:
        return {}
    n, k = int(_cfg(config, "num_heads", 0)), int(_cfg(config, "num_kv_heads", 0))
    return {"q_einsum": n, "qkv_einsum": n, "attn_vec_einsum": n, "kv_einsum": k}


def param_partition(path: Sequence[Any], shape: Sequence[int], sizes: Mapping[str, int], *,
                    transpose_gating: bool = True, heads: Mapping[str, int] | None = None) -> tuple[Axis, ...]:
    """The partition of one param on a mesh of ``sizes``: an axis whose size does not
    divide the dim is dropped (that dim is replicated on it).

    ``heads`` (``heads_of(config)``) lets a LoRA matrix with a flattened heads·H dim follow
    its base weight exactly: that dim goes on ``tensor`` only if the heads divide (e.g. one
    KV head stays replicated even though K·H = 64 would divide).
    """
    names = path_names(path)
    axes = logical_axes(names, shape, transpose_gating=transpose_gating)
    lora_kind = _lora_kind(names)
    out: list[Axis] = []
    for dim, axis in zip(shape, axes, strict=True):
        if axis is not None and (sizes.get(axis, 1) <= 1 or dim % sizes[axis]):
            axis = None
        if (axis == "tensor" and heads and lora_kind in heads
                and heads[lora_kind] % sizes["tensor"]):
            axis = None
        out.append(axis)
    return tuple(out)


# --------------------------------------------------------------------------- validation (pure)


@dataclass(frozen=True)
class Problem:
    level: str
    """"error" (cannot launch) or "warning" (launches, but not as you may expect)."""
    message: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.level}: {self.message}" + (f"; {self.hint}" if self.hint else "")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _fmt_choices(values: Sequence[int], limit: int = 6) -> str:
    vals = list(values)
    text = ", ".join(str(v) for v in vals[:limit])
    return text + (", …" if len(vals) > limit else "")


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def resolve(spec: MeshSpec, available: int) -> MeshSpec:
    """Fill the -1 axis for the devices this mesh uses (``spec.devices`` or all)."""
    if spec.devices and spec.devices > available:
        raise WorkbenchError(
            f"mesh.devices = {spec.devices}, but only {available} devices are available",
            where="[mesh] devices", hint=f"use mesh.devices ≤ {available}, or 0 for all",
        )
    count = spec.devices or available
    return dataclasses.replace(spec.resolve(count), devices=count)


def validate(mesh_spec: MeshSpec, config: Any, batch_size: int, seq_len: int, device_count: int, *,
             grad_accum: int = 1) -> list[Problem]:
    """Every problem of running ``config`` on this mesh, in words (pure; no jax).

    ``config`` is a gemma ``TransformerConfig`` or anything with its fields (a dict works):
    num_embed, embed_dim, hidden_dim, num_heads, head_dim, num_kv_heads, attention_types.
    ``batch_size`` is the global batch of one optimizer step; ``grad_accum`` splits it.
    ``device_count`` is the number of devices available.
    """
    problems: list[Problem] = []
    try:
        spec = resolve(mesh_spec, device_count)
    except WorkbenchError as err:
        return [Problem("error", err.message, err.hint or "")]
    data, fsdp, tensor = spec.data, spec.fsdp, spec.tensor
    n_dev = spec.devices

    # batch
    dp = data * fsdp
    if grad_accum < 1 or batch_size % grad_accum:
        problems.append(Problem(
            "error", f"batch_size={batch_size} is not divisible by grad_accum={grad_accum}",
            f"choose grad_accum ∈ {{{_fmt_choices(_divisors(batch_size))}}}"))
    else:
        micro = batch_size // grad_accum
        if micro % dp:
            what = (f"batch_size={batch_size}" if grad_accum == 1
                    else f"the micro-batch batch_size/grad_accum={micro}")
            good_b = [dp * k * grad_accum for k in range(1, 4)]
            problems.append(Problem(
                "error", f"{what} is not divisible by data×fsdp={data}×{fsdp}={dp}",
                f"choose batch_size {', '.join(map(str, good_b))}, … or data×fsdp ∈ "
                f"{{{_fmt_choices(_divisors(micro))}}}"))
    if seq_len < 2:
        problems.append(Problem("error", f"sequence length {seq_len} is too short", "use at least 2 tokens"))

    # model dims on tensor / fsdp
    v = int(_cfg(config, "num_embed", 0))
    d = int(_cfg(config, "embed_dim", 0))
    f = int(_cfg(config, "hidden_dim", 0))
    n = int(_cfg(config, "num_heads", 0))
    k = int(_cfg(config, "num_kv_heads", 0))
    if tensor > 1:
        for name, value, what in (
            ("num_heads", n, "the query and output projections are"),
            ("num_embed", v, "the embedding table is"),
            ("hidden_dim", f, "the MLP is"),
        ):
            if value and value % tensor:
                problems.append(Problem(
                    "warning",
                    f"tensor={tensor} does not divide {name}={value}; {what} replicated on the tensor axis",
                    f"choose tensor ∈ {{{_fmt_choices([t for t in _divisors(value) if n_dev % t == 0])}}}"
                    " or move devices to fsdp"))
        if k and k % tensor:
            extra = " (multi-query attention)" if k == 1 else ""
            problems.append(Problem(
                "warning",
                f"tensor={tensor} does not divide num_kv_heads={k}{extra}; "
                "the KV projection is replicated on the tensor axis",
                "fine for small KV projections; to shard it choose tensor ∈ "
                f"{{{_fmt_choices(_divisors(k))}}}"))
    if fsdp > 1 and d and d % fsdp:
        problems.append(Problem(
            "warning",
            f"fsdp={fsdp} does not divide embed_dim={d}; the weights are replicated on the fsdp axis "
            "(no memory saved)",
            f"choose fsdp ∈ {{{_fmt_choices([x for x in _divisors(d) if n_dev % x == 0])}}}"))
    return problems


def check(mesh_spec: MeshSpec, config: Any, batch_size: int, seq_len: int, device_count: int, *,
          grad_accum: int = 1) -> list[Problem]:
    """``validate``, raising a ``WorkbenchError`` for the first error; returns the warnings
    (also logged)."""
    problems = validate(mesh_spec, config, batch_size, seq_len, device_count, grad_accum=grad_accum)
    errors = [p for p in problems if p.level == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise WorkbenchError(first.message + more, where="[mesh]", hint=first.hint or None)
    for p in problems:
        log.warning("mesh: %s", p)
    return problems


# --------------------------------------------------------------------------- jax side


def make_mesh(spec: MeshSpec, devices: Sequence[Any] | None = None):
    """A ``jax.sharding.Mesh`` with axes (data, fsdp, tensor), Auto axis types."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh

    available = list(devices) if devices is not None else jax.devices()
    spec = resolve(spec, len(available))
    chosen = available[: spec.devices]
    try:
        from jax.experimental import mesh_utils

        grid = mesh_utils.create_device_mesh(spec.shape, devices=chosen)
    except Exception:  # noqa: BLE001 - CPU or odd topologies: plain order is fine
        grid = np.asarray(chosen, dtype=object).reshape(spec.shape)
    return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def mesh_sizes(mesh: Any) -> dict[str, int]:
    return {name: int(size) for name, size in mesh.shape.items()}


def _gating(config: Any) -> bool:
    return bool(_cfg(config, "transpose_gating_einsum", True)) if config is not None else True


def param_sharding(mesh: Any, path: Sequence[Any], shape: Sequence[int], *, config: Any = None):
    """The ``NamedSharding`` of one param (``config``: the model's, for gating layout and heads)."""
    from jax.sharding import NamedSharding, PartitionSpec

    axes = param_partition(path, shape, mesh_sizes(mesh), transpose_gating=_gating(config),
                           heads=heads_of(config))
    return NamedSharding(mesh, PartitionSpec(*axes))


def params_shardings(mesh: Any, params: Any, *, config: Any = None):
    """A tree of ``NamedSharding`` for a params tree (arrays or ShapeDtypeStructs)."""
    import jax

    return jax.tree_util.tree_map_with_path(
        lambda path, x: param_sharding(mesh, path, x.shape, config=config), params)


class ParamPlacement:
    """A ``(path, leaf) -> Sharding`` callable over a mesh, with a ``placement_key`` naming it
    (``models.model_cache``: a model placed the same way is reused)."""

    def __init__(self, mesh: Any, config: Any = None):
        self.mesh = mesh
        self.config = config
        flat = list(mesh.devices.flat)
        if len(flat) == 1:  # one device: the same place as a plain single-device load
            self.placement_key: tuple = ("device", int(flat[0].id))
        else:
            self.placement_key = ("mesh", tuple(int(d.id) for d in flat), tuple(mesh.axis_names),
                                  tuple(mesh.devices.shape), repr(config))

    def __call__(self, path: Any, x: Any) -> Any:
        return param_sharding(self.mesh, path, x.shape, config=self.config)


def sharding_fn(mesh: Any, config: Any = None) -> ParamPlacement:
    """A ``(path, leaf) -> Sharding`` callable (what ``models.loader.load_model`` takes)."""
    return ParamPlacement(mesh, config)


def batch_sharding(mesh: Any, ndim: int = 2):
    """Leading dim on (data, fsdp), the rest replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, *([None] * (ndim - 1))))


def replicated(mesh: Any):
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec())


def like_params_shardings(mesh: Any, tree: Any, params_shardings_tree: Any):
    """Shardings for a tree that mirrors params in places (e.g. an optax state):
    a leaf whose key path ends with a param's path and has its shape gets that param's
    sharding; every other leaf (counts, scalars) is replicated."""
    import jax

    table: dict[tuple[str, ...], Any] = {}
    for path, s in jax.tree_util.tree_flatten_with_path(params_shardings_tree)[0]:
        table[path_names(path)] = s
    lengths = sorted({len(p) for p in table}, reverse=True)
    rep = replicated(mesh)

    def pick(path, leaf):
        names = path_names(path)
        for n in lengths:
            if len(names) >= n and names[-n:] in table:
                s = table[names[-n:]]
                if len(getattr(leaf, "shape", ())) == len(s.spec):
                    return s
        return rep

    return jax.tree_util.tree_map_with_path(pick, tree)


def describe(mesh_spec: MeshSpec, device_count: int) -> str:
    spec = resolve(mesh_spec, device_count)
    return (f"mesh data×fsdp×tensor = {spec.shape_text()} on {spec.devices} devices "
            f"(batch on data×fsdp = {spec.data * spec.fsdp})")
