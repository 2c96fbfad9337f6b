"""Checkpoints: orbax ``CheckpointManager`` over a run's ``checkpoints/`` folder.

One sub-directory per step, each with three items:
- ``params``: the trainable params (the adapters; every param for a full fine-tune);
- ``opt_state``: the optax state;
- ``meta``: JSON — step, the RNG key data, and the loss at that step.
The data position is the step itself (the pipeline is a pure function of (seed, step)).
Orbax writes to a temporary folder and renames it when complete; which steps count (whole,
finite) is ``adapters_lib.runs.checkpoints``' one rule, and so is retention: orbax keeps every
step here and ``CheckpointStore.prune`` applies ``runs.checkpoints.prune_plan``. A save
checks that the params and optimizer state are finite first (``NonFiniteState``): a
diverged state is never written, and a checkpoint's meta says ``finite: true``. Restores pass
an abstract target tree (ShapeDtypeStruct with shardings) so that optax state types come back
as they were (see STACK-NOTES). Loading a run's tuned model for sampling and export is
``adapters_lib.tuned``'s (``tuned.checkpoint.load_checkpoint``).
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from adapters_lib.runs import checkpoints as rule

__all__ = ["ITEMS", "CheckpointStore", "NonFiniteState", "abstract_of", "abstract_trainable",
           "all_finite", "place", "restore_params", "rng_from_json", "rng_to_json", "saved_host"]

log = logging.getLogger(__name__)

ITEMS = ("params", "opt_state", "meta")

WHOLE_SHARD_BYTES = 1 << 20
"""Below this many bytes a replica, a replicated array's shard is saved whole by one replica.
Orbax's default splits every replicated shard among its replicas (each writes a slice), and
each slice shape is one more small program to compile at the first save. A LoRA state is
hundreds of arrays of a few KB: the first checkpoint of the demo's rank-8 adapters on a 2×4
CPU mesh compiled 56 slice programs (1.8 of its 2.0 s; 0.2 s saved whole). Larger arrays
(full fine-tunes) are still written in parallel slices."""

_whole_shards = False


def _save_small_shards_whole() -> None:
    """Orbax's ``jax.Array`` handler, as orbax registers it, with ``WHOLE_SHARD_BYTES`` as its
    minimum slice for a replica-parallel save (once per process)."""
    global _whole_shards
    if _whole_shards:
        return
    from orbax.checkpoint._src.metadata import array_metadata_store

    handler = ocp.type_handlers.ArrayHandler(array_metadata_store=array_metadata_store.Store(),
                                             min_slice_bytes_for_replica_parallel=WHOLE_SHARD_BYTES)
    absl_log = logging.getLogger("absl")
    level = absl_log.level
    absl_log.setLevel(logging.ERROR)  # orbax warns that a handler is replaced: this one is meant to
    try:
        ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)
    finally:
        absl_log.setLevel(level)
    _whole_shards = True


def abstract_of(tree: Any, sharding: Any = None) -> Any:
    """ShapeDtypeStructs of ``tree``, keeping each array's sharding (or ``sharding``)."""

    def one(x: Any) -> Any:
        if not hasattr(x, "shape"):
            return x
        s = sharding if sharding is not None else getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)

    return jax.tree.map(one, tree)


class NonFiniteState(ValueError):
    """The state to checkpoint holds NaN or inf: it is not written."""


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


HOST_CHECK_BYTES = 256 << 20
"""A state up to this size (LoRA adapters and their optimizer state) is checked on the host: the
device's check is one program per tree of shapes, and on a TPU its compile took 5–8 s at the end
of every run of a new rank (the Gemma-3-1B shape, 1,092 leaves); the fetch takes milliseconds."""


def small_here(tree: Any) -> bool:
    """Whether ``tree`` is cheap to fetch to this host: one process holding every value, at most
    ``HOST_CHECK_BYTES`` (LoRA adapters and their optimizer state)."""
    leaves = jax.tree.leaves(tree)
    return (bool(leaves) and jax.process_count() == 1
            and all(getattr(x, "is_fully_addressable", True) for x in leaves)
            and sum(int(getattr(x, "nbytes", 0)) for x in leaves) <= HOST_CHECK_BYTES)


def all_finite(tree: Any) -> bool:
    """Whether every floating value of ``tree`` is finite: numpy on the host for a small state
    (``HOST_CHECK_BYTES``, one process) or a tree fetched already (``lora.family.fit(host=True)``),
    else one program on the device and a one-value fetch."""
    leaves = jax.tree.leaves(tree)
    if leaves and all(isinstance(x, np.ndarray | np.generic) for x in leaves):
        return all(bool(np.isfinite(x).all()) for x in leaves if jnp.issubdtype(x.dtype, jnp.inexact))
    if small_here(tree):
        return all_finite(jax.device_get(tree))
    return bool(jax.device_get(_all_finite(tree)))


class CheckpointStore:
    """Save and restore (trainable, opt_state, meta) per step; retention by ``prune``."""

    def __init__(self, directory: str | Path, *, keep: int = 3, read_only: bool = False):
        self.directory = Path(directory).absolute()
        self.keep = keep
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None, create=not read_only, read_only=read_only,
            enable_async_checkpointing=True, cleanup_tmp_directories=not read_only,
        )
        _save_small_shards_whole()
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=ITEMS)

    def latest_step(self) -> int | None:
        """The newest complete, finite checkpoint (``runs.checkpoints``' rule)."""
        return rule.latest_complete(self.directory)

    def steps(self) -> list[int]:
        return rule.complete_steps(self.directory)

    def save(self, step: int, trainable: Any, opt_state: Any, meta: dict[str, Any]) -> bool:
        """Start an asynchronous save (orbax copies device arrays before returning); False when
        ``step`` is saved already (a stop right after a periodic checkpoint): it is kept as
        is, the params of one step are the same whoever saves them.

        Raises ``NonFiniteState`` (and writes nothing) if the state holds NaN or inf.
        """
        self.manager.wait_until_finished()  # orbax would wait here anyway; then the listing is final
        if step in self.steps():
            return False
        if not all_finite((trainable, opt_state)):
            raise NonFiniteState(f"the trained values became NaN or infinite by step {step}")
        self.manager.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(trainable),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave({**meta, "step": int(step), "finite": True}),
        ), force=True)
        return True

    def prune(self, confirmed_below: int | None, pinned: Any = ()) -> None:
        """Apply ``train.keep_checkpoints`` to the checkpoints known good (``prune_plan``)."""
        self.manager.wait_until_finished()
        for step in rule.prune_plan(self.steps(), self.keep, confirmed_below, pinned):
            self._delete(step)

    def discard_from(self, step: int) -> list[int]:
        """Delete every checkpoint at or after ``step`` (made from diverged params); what is left."""
        self.manager.wait_until_finished()
        for k, _ in rule.step_folders(self.directory):
            if k >= step:
                self._delete(k)
        return self.steps()

    def _delete(self, step: int) -> None:
        try:
            self.manager.delete(step)
        except Exception:  # noqa: BLE001 - orbax may not list a step it did not write
            import shutil

            shutil.rmtree(self.directory / str(step), ignore_errors=True)

    def restore(self, step: int, abstract_trainable: Any, abstract_opt_state: Any) -> tuple[Any, Any, dict]:
        out = self.manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_trainable),
            opt_state=ocp.args.StandardRestore(abstract_opt_state),
            meta=ocp.args.JsonRestore(),
        ))
        return out["params"], out["opt_state"], dict(out["meta"])

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self, *, quiet: bool = False) -> None:
        """Wait for the last save and close; ``quiet`` (an error is already on its way): a
        failed save is logged, not raised over that error."""
        try:
            self.manager.wait_until_finished()
        except Exception:
            if not quiet:
                raise
            log.warning("a checkpoint save failed too", exc_info=True)
        finally:
            try:
                self.manager.close()
            except Exception:
                if not quiet:
                    raise
                log.warning("closing the checkpoint manager failed", exc_info=True)

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_SAVED: collections.OrderedDict[str, tuple[int, tuple[int, int, int], Any]] = collections.OrderedDict()
"""The last runs' final checkpoints as this process wrote them (a run's folder → step, the step
folder's identity, the host tree; the newest ``KEEP_SAVED``): ``restore_params`` takes one
instead of reading it back."""
KEEP_SAVED = 2


def _identity(folder: Path) -> tuple[int, int, int] | None:
    """A folder's identity: a folder made again has another (its ctime is the system's)."""
    try:
        st = folder.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def remember_saved(directory: str | Path, step: int, trainable: Any) -> bool:
    """Keep a host copy of ``trainable`` (a run's final adapters) as checkpoint ``step`` of
    ``directory``, written by now, so that the Compare right after the run places it instead of
    reading it back (orbax's restore: ~0.5-1 s of the warm-up on a TPU host). Only a tree
    ``small_here``; False when not kept."""
    if not small_here(trainable):
        return False
    root = Path(directory).absolute()
    ident = _identity(root / str(step))
    if ident is None:
        return False
    _SAVED[str(root)] = (int(step), ident, jax.device_get(trainable))
    _SAVED.move_to_end(str(root))
    while len(_SAVED) > KEEP_SAVED:
        _SAVED.popitem(last=False)
    return True


def saved_host(directory: str | Path, step: int, abstract: Any) -> Any:
    """The remembered tree of checkpoint ``step`` on the host (numpy, in ``abstract``'s dtypes),
    not placed; None when there is none, the step folder is not the one written (deleted,
    written again) or the tree's structure or shapes differ."""
    root = Path(directory).absolute()
    got = _SAVED.get(str(root))
    if got is None or got[0] != int(step) or _identity(root / str(step)) != got[1]:
        return None
    tree = got[2]
    try:
        if jax.tree.structure(tree) != jax.tree.structure(abstract) or any(
                tuple(x.shape) != tuple(a.shape) for x, a in zip(jax.tree.leaves(tree), jax.tree.leaves(abstract),
                                                                 strict=True)):
            return None
        return jax.tree.map(lambda x, a: np.asarray(x, dtype=a.dtype), tree, abstract)
    except (TypeError, ValueError):
        return None


def place(tree: Any, abstract: Any) -> Any:
    """A host tree placed as ``abstract`` says, in one transfer call (a ``device_put`` for each
    leaf is dispatched apart: on a TPU a few hundred transfers for a LoRA tree)."""
    leaves, treedef = jax.tree.flatten(tree)
    shardings = [a.sharding for a in jax.tree.leaves(abstract)]
    return jax.tree.unflatten(treedef, jax.device_put(leaves, shardings))


def _saved(directory: str | Path, step: int, abstract: Any) -> Any:
    """The remembered tree of checkpoint ``step``, placed as ``abstract`` says; None when there
    is none (``saved_host``)."""
    tree = saved_host(directory, step, abstract)
    return None if tree is None else place(tree, abstract)


def restore_params(directory: str | Path, step: int, abstract_trainable: Any, *, host: bool = False) -> Any:
    """Only the trainable params of one checkpoint (for sampling and export); reads nothing else.
    The checkpoint this process wrote last for the directory is placed from memory
    (``remember_saved``) when its step folder is still the one written; ``host``: that one is
    returned as it is kept (numpy, not placed: the caller folds it and places it once).

    Process-local: in a multi-host job only the calling process reads (the target's shardings
    are on its own devices), so it does not wait in orbax's all-process barrier for processes
    that are busy elsewhere (the multi-host engine samples on process 0 alone).
    """
    kept = (saved_host if host else _saved)(directory, step, abstract_trainable)
    if kept is not None:
        return kept
    path = Path(directory).absolute() / str(step) / "params"
    options = {}
    if jax.process_count() > 1:
        me = jax.process_index()
        options["multiprocessing_options"] = ocp.options.MultiprocessingOptions(
            primary_host=me, active_processes={me}, barrier_sync_key_prefix=f"restore-p{me}")
    with ocp.StandardCheckpointer(**options) as checkpointer:
        return checkpointer.restore(path, abstract_trainable)


def abstract_trainable(loaded: Any, cfg: Any, sharding: Any = None) -> Any:
    """The abstract trainable tree of a run: adapter shapes for LoRA, base shapes otherwise.

    ``sharding`` defaults to this process's first device (what a sampler in one process wants;
    on a multi-host follower, global device 0 is another process's).
    """
    from adapters_lib.lora import traced_shapes

    sharding = sharding or jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    if not cfg.lora.enabled:
        return abstract_of(jax.eval_shape(lambda p: p, loaded.params), sharding)
    # ``init_lora``'s tree, from the shapes traced once per model (no trace of the init: the
    # Compare's model build after a run, 0.16 of the demo's 0.34 s on the CPU)
    return abstract_of(traced_shapes.adapter_shapes(loaded.model, cfg.lora), sharding)


def rng_to_json(key: jax.Array) -> list[int]:
    return np.asarray(jax.random.key_data(key)).astype(np.uint32).ravel().tolist()


def rng_from_json(data: list[int]) -> jax.Array:
    return jax.random.wrap_key_data(np.asarray(data, np.uint32))

