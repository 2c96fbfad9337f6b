"""One compiled program for a family of LoRA configs: any rank up to a bucket, any alpha, any targets.

A train step compiles for ~90 s on a TPU (XLA:TPU, whatever the model), and what a user tweaks
between two runs — the rank, alpha, the targets — used to be part of the program. Here it is not:

- **rank**: the adapters are padded to a bucket (``rank_bucket``: 128 on a TPU, one pass of the
  v5e's 128-wide MXU, where a rank-8 product costs what a rank-128 one does; vLLM's TPU backend
  pads every adapter to ``max_lora_rank`` for the same reason). The rows past the run's rank are
  masked: ``A[:, r:]`` and ``B[r:, :]`` are multiplied by 0 in the step, so they never change the
  output and get exactly zero gradients (AdamW and weight decay then leave them at zero).
- **alpha**: ``alpha / rank`` is a runtime scalar that multiplies A in the step (the program's
  modules carry scale 1), so the update is ``scale · x·A·B`` as in the exact program.
- **targets**: the program carries every target the model has; the ones the run did not choose
  are masked to zero the same way (their products run, on zeros). What that costs depends on
  the bucket: at the Gemma-3-1B shape on a v5e the rank-128 family cost 7.6 % (r16 on every
  target) to 39 % (r8 on q, v) a step at 2 × 2048, and the rank-32 family ``"auto"`` picks at
  4 × 2048 ran 3.5 % faster than the run's own program (BENCHMARKS.md, "TPU v5e").

``LoraFamily.runtime()`` are those numbers (host arrays, step inputs); ``apply_runtime`` is the
step's transform of the adapter tree; ``fit`` moves a tree between the run's own shapes and the
program's (pad with zeros, or slice): checkpoints and exports always hold the run's own rank and
targets, never the padding. ``resolve`` decides from ``train.programs`` and the platform.

Importing this module is cheap (JAX only inside the functions that need it).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from adapters_lib.config import LORA_TARGETS, PROGRAMS, LoraSpec

log = logging.getLogger(__name__)

MXU = 128
"""A TPU MXU's width (v4, v5e, v5p: 128 × 128; v6e's 256 × 256 takes 128 in two passes): the
rank bucket's step on a TPU."""


def rank_bucket(rank: int, platform: str, setting: int = 0) -> int:
    """The rank the family's adapters are padded to: ``setting`` when set (at least ``rank``),
    else the next multiple of the MXU's 128 on a TPU, else the next power of two from 16."""
    if setting:
        return max(int(setting), int(rank))
    if platform == "tpu":
        return -(-int(rank) // MXU) * MXU
    return max(16, 1 << (int(rank) - 1).bit_length())


def wants_family(setting: str, platform: str) -> bool:
    """``train.programs``: "family", "exact", or "auto" (a family on an accelerator, where a
    compile costs a minute or more; exact on a CPU, where it costs seconds and the padded
    products cost real FLOPs)."""
    if setting not in PROGRAMS:
        raise ValueError(f"train.programs {setting!r}: expected one of {PROGRAMS}")
    if setting == "family":
        return True
    if setting == "exact":
        return False
    return platform != "cpu"


@dataclasses.dataclass(frozen=True)
class LoraFamily:
    """A run's LoRA spec (``spec``) inside the program of its family (``program``)."""

    spec: LoraSpec
    """The run's own: its rank, alpha and targets (what checkpoints and exports hold)."""
    program: LoraSpec
    """The compiled one: the bucket's rank, every target of the family, scale 1."""

    def runtime(self) -> dict[str, Any]:
        """The step's inputs (host numpy): ``scale`` (alpha / rank), ``rank_mask`` ([bucket]: 1
        up to the run's rank), ``targets`` (1 or 0 a target of the program)."""
        import numpy as np

        mask = (np.arange(self.program.rank) < self.spec.rank).astype(np.float32)
        return {"scale": np.float32(self.spec.scale), "rank_mask": mask,
                "targets": {t: np.float32(t in self.spec.targets) for t in self.program.targets}}

    def describe(self) -> str:
        off = [t for t in self.program.targets if t not in self.spec.targets]
        return (f"rank {self.spec.rank} in a rank-{self.program.rank} program"
                + (f", targets {', '.join(off)} masked" if off else "")
                + f", scale {self.spec.scale:g} a runtime value")


def family_targets(spec: LoraSpec) -> tuple[str, ...]:
    """Every projection target, plus the experts when the run adapts them (an expert bank's
    adapters are large: they join the program only when asked for)."""
    return (*LORA_TARGETS, *(("experts",) if "experts" in spec.targets else ()))


def resolve(spec: LoraSpec, *, programs: str, platform: str, bucket: int = 0) -> LoraFamily | None:
    """The run's family, or None for the exact program (``train.programs``, the platform)."""
    if not spec.enabled or not wants_family(programs, platform):
        return None
    r = rank_bucket(spec.rank, platform, bucket)
    program = dataclasses.replace(spec, rank=r, alpha=float(r), targets=family_targets(spec))
    return LoraFamily(spec=spec, program=program)


def run_family(cfg: Any, platform: str) -> Any:
    """The run's LoRA program family (``lora.family.resolve``), or None: a full fine-tune, the
    Keras route, a DPO reference run, ``train.programs = "exact"``, or "auto" on a CPU."""
    t = cfg.train
    if not cfg.lora.enabled or cfg.model.backend != "gemma" or getattr(t, "reference", "base") not in ("", "base"):
        return None
    return resolve(cfg.lora, programs=getattr(t, "programs", "auto"), platform=platform,
                               bucket=getattr(t, "rank_bucket", 0))


def _target_of(name: str) -> str | None:
    """The target an adapter leaf belongs to (``q_a`` → q, ``lora_experts_gate_b`` → experts)."""
    if name.startswith("lora_experts_"):
        return "experts"
    if name.endswith(("_a", "_b")) and name[:-2] in LORA_TARGETS:
        return name[:-2]
    return None


def _leaf_name(path: tuple) -> str:
    last = path[-1] if path else None
    return str(getattr(last, "key", getattr(last, "name", last)))


def subset(leaves: list, targets: tuple[str, ...]) -> tuple[list, Any] | None:
    """The ``(path, leaf)`` pairs and tree of ``targets``' adapters among ``leaves`` (a flattened
    nested dict of adapters of more targets, ``tree_flatten_with_path``): the leaves whose target
    (``_target_of`` their name) is one of ``targets``, at the same paths, which ``fit`` relies
    on (tests/test_lora.py compares them with a trace of ``targets`` alone). None where a
    leaf's target is not read off its name or a key is not a dict's."""
    import jax

    kept: dict = {}
    for path, leaf in leaves:
        keys = [getattr(k, "key", None) for k in path]
        target = _target_of(str(keys[-1])) if keys else None
        if target is None or not all(isinstance(k, str) for k in keys):
            return None
        if target in targets:
            node = kept
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = leaf
    return jax.tree_util.tree_flatten_with_path(kept)


def apply_runtime(adapters: Any, runtime: Any, *, host: bool = False) -> Any:
    """The adapter tree the program's modules see: each A times ``scale``, its target's switch
    and the rank mask (columns), each B times the rank mask (rows). Differentiable: the masked
    rows' gradients are exactly zero, the kept ones are the exact program's times nothing.
    ``host``: ``adapters`` are numpy arrays, folded in numpy (no op dispatched to a device)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    xp = np if host else jnp

    def one(path, x):
        name = _leaf_name(path)
        target = _target_of(name)
        if target is None:
            return x
        m = xp.asarray(runtime["rank_mask"], x.dtype)
        if name.endswith("_a"):  # [..., in, r]
            factor = xp.asarray(runtime["scale"], x.dtype) * xp.asarray(runtime["targets"][target], x.dtype)
            return x * (m * factor)
        return x * m[:, None]  # B: [..., r, out]

    return jax.tree_util.tree_map_with_path(one, adapters)


def fit(tree: Any, like: Any, *, host: bool = False) -> Any:
    """``tree``'s values in ``like``'s shapes and structure: each leaf of ``like`` takes the leaf
    at the same path of ``tree``, sliced or zero-padded at the end of each axis (the rank), or
    zeros where ``tree`` has none (a masked target). Params and optimizer states alike (their
    adapter leaves sit under the same keys).

    ``host``: fetch ``tree`` once and fit it in numpy (a family run's checkpoint: on a TPU each
    leaf's slice op compiled apart, seconds for every new rank at the end of a run; one process
    only, where every value is addressable here)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if host:
        tree = jax.device_get(tree)
    xp = np if host else jnp
    have = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
    paths, treedef = jax.tree_util.tree_flatten_with_path(like)

    def one(path, want):
        x = have.get(jax.tree_util.keystr(path))
        shape, dtype = tuple(want.shape), want.dtype
        if x is None:
            return xp.zeros(shape, dtype)
        if tuple(np.shape(x)) == shape:
            return x
        if len(np.shape(x)) != len(shape):
            raise ValueError(f"{jax.tree_util.keystr(path)}: shape {tuple(np.shape(x))} does not fit {shape}")
        x = x[tuple(slice(0, min(a, b)) for a, b in zip(np.shape(x), shape, strict=True))]
        pads = [(0, b - a) for a, b in zip(np.shape(x), shape, strict=True)]
        return xp.pad(x, pads) if any(p for _, p in pads) else x

    return jax.tree_util.tree_unflatten(treedef, [one(p, w) for p, w in paths])
