"""A tuned model's adapters in its LoRA family's programs, for sampling and evaluation.

The train step compiles one program for a family of LoRA configs (``lora.family``: the rank
padded to a bucket, every target present, alpha a runtime value). Generation and ``eval``
take the same route, but have no step inputs to carry the runtime values: here they are
folded into the adapters once, when a checkpoint loads. The tree is padded to the family's
shapes (``lora.family.fit``: zeros past the run's rank, zeros for the targets it did not
choose) and ``lora.family.apply_runtime`` multiplies each A by ``alpha / rank`` and the masks;
the program is built for ``family.program``, whose modules have scale 1. So
``scale · x·A·B == x·(scale·A)·B`` is computed, and a new rank (within the bucket), alpha or
targets between two runs reuses the compiled prefill, decode and eval programs (vLLM folds
alpha / rank into B at load the same way).

``train.programs`` decides, as for the step (``lora.family.resolve``): on a CPU "auto" keeps
the exact program (a compile costs seconds there, the padded products real FLOPs).
Importing this module is cheap.
"""

from __future__ import annotations

from typing import Any

from adapters_lib.config import LoraSpec


def family_of(spec: LoraSpec | None, cfg: Any = None, platform: str = "") -> Any:
    """The ``lora.family.LoraFamily`` a run's (or an adapter folder's) adapters are served in,
    or None for the exact program. ``cfg``: the run's config (its ``train.programs`` and
    ``train.rank_bucket``); None (an adapter folder): the defaults."""
    from adapters_lib.config import TrainSpec
    from adapters_lib.lora import family as lora_family

    if spec is None or not spec.enabled:
        return None
    train = cfg.train if cfg is not None else TrainSpec()
    if not platform:
        import jax

        platform = jax.default_backend()
    return lora_family.resolve(spec, programs=train.programs, platform=platform, bucket=train.rank_bucket)


def in_family(model: Any, family: Any, adapters: Any, *, host: bool | None = None) -> Any:
    """``adapters`` (the run's own shapes) as the family's program takes them: padded to the
    bucket and every target, scale and masks folded in, in the adapters' own float dtype.
    ``host``: fold in numpy then place (None: wherever one process holds every value)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.lora import family as lora_family
    from adapters_lib.lora import traced_shapes

    dtype = next((x.dtype for x in jax.tree.leaves(adapters) if jnp.issubdtype(x.dtype, jnp.floating)),
                 jnp.dtype(family.program.dtype))
    like = traced_shapes.adapter_shapes(model, family.program)
    if _foldable_on_host(adapters) if host is None else host:
        return _in_family_on_host(family, adapters, like, dtype)
    padded = lora_family.fit(adapters, like)
    folded = lora_family.apply_runtime(padded, family.runtime())
    return jax.tree.map(lambda x: x.astype(dtype), folded)


def _foldable_on_host(adapters: Any) -> bool:
    """Whether ``in_family`` folds in numpy: one process, every value addressable here. On a
    TPU each leaf's pad, multiply and cast is an op compiled apart, per new shape: ~1-2 s of
    the Compare warm-up's device time at every new rank (the run after waited for it)."""
    import jax

    if jax.process_count() != 1:
        return False
    return all(getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(adapters))


def _in_family_on_host(family: Any, adapters: Any, like: Any, dtype: Any) -> Any:
    """``in_family`` in numpy, then one transfer: each leaf placed as the run's leaf at its path
    was (its sharding: the padding is on the rank axis only), a new target's as a sibling's; a
    host tree's (a run's final adapters kept in memory) on this process's first device."""
    import jax
    import numpy as np

    from adapters_lib.lora import family as lora_family

    placed = {jax.tree_util.keystr(p): getattr(x, "sharding", None)
              for p, x in jax.tree_util.tree_flatten_with_path(adapters)[0]}
    fallback = next((s for s in placed.values() if s is not None), None) or first_device()
    paths, treedef = jax.tree_util.tree_flatten_with_path(like)
    try:  # folded at the run's own rank, then padded (the products over the padding are zeros)
        values = _padded(_folded_at_rank(family, jax.device_get(adapters)), paths, dtype)
    except ValueError:  # not the run's own rank: folded after the padding
        padded = lora_family.fit(adapters, like, host=True)
        folded = lora_family.apply_runtime(padded, family.runtime(), host=True)
        values = [np.asarray(x).astype(dtype) for x in jax.tree.leaves(folded)]
    shardings = [placed.get(jax.tree_util.keystr(p)) or fallback for p, _ in paths]
    try:  # one transfer call (a device_put for each leaf: a few hundred dispatched apart on a TPU)
        return jax.tree_util.tree_unflatten(treedef, jax.device_put(values, shardings))
    except ValueError:  # a sharding a padded shape does not divide: that leaf on the default device
        pass

    def put(x: Any, sharding: Any) -> Any:
        try:
            return jax.device_put(x, sharding)
        except ValueError:
            return jax.device_put(x)

    return jax.tree_util.tree_unflatten(treedef, [put(x, s) for x, s in zip(values, shardings, strict=True)])


def _folded_at_rank(family: Any, adapters: Any) -> Any:
    """``lora.family.apply_runtime`` on the run's own tree (host numpy): its rank mask cut to the
    run's rank, so each A is multiplied by its scale and switch over the run's rank only (the
    padding's products are zeros: at rank 8 in a bucket of 128, 1/16 of the work). ValueError
    when a leaf's rank axis is not the run's rank."""
    import jax
    import numpy as np

    from adapters_lib.lora import family as lora_family

    runtime = family.runtime()
    rank = int(family.spec.rank)
    for path, x in jax.tree_util.tree_flatten_with_path(adapters)[0]:
        name = lora_family._leaf_name(path)
        if lora_family._target_of(name) is not None and np.shape(x)[-1 if name.endswith("_a") else -2] != rank:
            raise ValueError(f"{name}: rank axis {np.shape(x)} is not the run's rank {rank}")
    return lora_family.apply_runtime(adapters, {**runtime, "rank_mask": runtime["rank_mask"][:rank]}, host=True)


def _padded(tree: Any, paths: list[Any], dtype: Any) -> list[Any]:
    """``lora.family.fit(host=True)`` then the cast to ``dtype``, in one pass: for each ``(path,
    like)`` of ``paths``, zeros of ``like``'s shape in ``dtype`` holding ``tree``'s leaf at that
    path at the start of each axis (none for a target the run did not choose)."""
    import jax
    import numpy as np

    have = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
    out = []
    for path, want in paths:
        leaf = np.zeros(tuple(want.shape), dtype)
        x = have.get(jax.tree_util.keystr(path))
        if x is not None:
            if np.ndim(x) != leaf.ndim:
                raise ValueError(f"{jax.tree_util.keystr(path)}: shape {np.shape(x)} does not fit {leaf.shape}")
            cut = tuple(slice(0, min(a, b)) for a, b in zip(np.shape(x), leaf.shape, strict=True))
            leaf[cut] = np.asarray(x)[cut]
        out.append(leaf)
    return out


def first_device() -> Any:
    """This process's first device, as a sharding (where a checkpoint's adapters are restored for
    sampling: ``train.checkpoints.abstract_trainable``)."""
    import jax

    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def on_host(tree: Any) -> bool:
    """Whether every leaf of ``tree`` is a host (numpy) array: a run's final adapters as this
    process kept them (``train.checkpoints.saved_host``), not placed yet."""
    import jax
    import numpy as np

    leaves = jax.tree.leaves(tree)
    return bool(leaves) and all(isinstance(x, np.ndarray | np.generic) for x in leaves)


def placed(tree: Any) -> Any:
    """``tree`` on this process's first device in one transfer call when it is on the host
    (``on_host``); as it is otherwise."""
    import jax

    if tree is None or not on_host(tree):
        return tree
    return jax.device_put(tree, first_device())


def serving(model: Any, spec: LoraSpec | None, adapters: Any, cfg: Any = None,
            platform: str = "") -> tuple[LoraSpec | None, Any]:
    """``(spec, adapters)`` to build the sampler (or the scorer) with: the family's program
    spec and the folded adapters, or the run's own two where the exact program serves.
    ``adapters`` on the host (``on_host``) come back placed on this process's first device."""
    family = family_of(spec, cfg, platform) if adapters is not None else None
    if family is None:
        return spec, placed(adapters)
    return family.program, in_family(model, family, adapters)
