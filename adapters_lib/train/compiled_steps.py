"""The compiled train and eval steps of a run and what they need around them: ``Steps``
(what ``train.step.build_steps`` returns: the jitted functions, their shardings, the state
and batch placement, the compiled memory analysis), ``TrainState``, ``DeviceBatch``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from adapters_lib.train import loss as loss_lib
from adapters_lib.train.objectives.sft import BATCH_KEYS

log = logging.getLogger(__name__)


class TrainState(NamedTuple):
    """What the train step carries (and donates) from step to step."""

    step: jax.Array
    """int32 scalar: optimizer updates applied so far."""
    params: Any
    """The trainable params: the adapters, or every param for a full fine-tune."""
    opt_state: Any


@dataclasses.dataclass
class Steps:
    """The compiled-on-first-use train/eval steps and the shardings they use."""

    model: Any
    """The module the step applies (wrapped with LoRA and/or remat)."""
    mesh: Any
    optimizer: optax.GradientTransformation
    base_params: Any
    """The frozen params placed on the mesh ({} for a full fine-tune)."""
    trainable_shardings: Any
    base_shardings: Any
    state_shardings: TrainState
    batch_sharding: Any
    ce_chunk: int
    abstract_state: TrainState
    """ShapeDtypeStructs (with shardings) of the state: a restore target for checkpoints."""
    _train: Any
    _eval: Any
    _init_opt: Any
    _copy: Any
    gather_loss: bool = True
    """Compute the logits only at loss-bearing positions (``loss.gather_loss_positions``)."""
    attention_kind: str = "blocked"
    """How the training attention is computed (``attention.KINDS``)."""
    ce_kernel: str = "xla"
    """How the cross-entropy is computed (``loss.CE_KERNELS``): XLA's chunked matmuls or the splash kernel."""
    hparams: dict = dataclasses.field(default_factory=dict)
    """The schedule's numbers the train step is given (``optimizer.schedule_hparams``), on the
    mesh; with a LoRA family, its runtime values under ``"lora"`` too."""
    lora_runtime: dict = dataclasses.field(default_factory=dict)
    """A LoRA family's runtime values (``lora.family.LoraFamily.runtime``: scale, rank mask,
    target switches) on the mesh; {} for an exact program. The eval step's input too."""
    family: Any = None
    """The run's ``lora.family.LoraFamily`` (the program covers a family of LoRA specs), or None."""
    objective: Any = None
    """The training objective (``train.objectives``); its ``batch_keys`` are what ``put_batch`` places."""
    reference_params: Any = dataclasses.field(default_factory=dict)
    """A reference run's adapters on the mesh (DPO ``reference = "run:…"``); {} otherwise."""
    compile_behind: bool = False
    """A batch whose own program is not compiled yet runs in a compiled one with more loss
    positions a row (the extra ones weigh 0: the same loss) while its own compiles in the
    background, and the eval step compiles before the first eval (``compile_eval_behind``):
    on an accelerator, where a compile is minutes (the Gemma-3-1B step ~100 s on a v5e) and
    the host is idle while the device steps. Off on a CPU, where the compile would take the
    cores the steps run on."""
    run_slots: int | None = None
    """The most loss positions a row any batch of the run needs (``train.plan.widest_slots``,
    read from the host data before the first step), or None (unknown). With ``compile_behind``,
    a batch that no compiled program covers compiles this many positions in the foreground (its
    own program behind): no later batch of the run then compiles in the foreground."""
    _compiled: set = dataclasses.field(default_factory=set)
    """What the log has said: (kind, batch shape, slots) run, ("behind", kind, shape, slots) waited for."""

    # -- state
    def init_state(self, trainable_params: Any, *, copy: bool = True) -> TrainState:
        """A fresh state on the mesh: step 0, the params placed, the optimizer initialised.

        The state is donated to the train step, so by default the params are copied and the
        caller's arrays stay valid; ``copy=False`` hands them over (saves one copy of the
        trainable params: worth it for a full fine-tune) and they die at the first step.
        """
        host = _host_device(trainable_params, self.mesh)
        params = jax.device_put(trainable_params, self.trainable_shardings)
        if host is not None:  # fresh values made on the host (``plan.on_host``): moved, not shared;
            with jax.default_device(host):  # the optimizer's zeros made there too (on a TPU its
                opt_host = self.optimizer.init(trainable_params)  # program compiled per tree of
            opt_state = jax.device_put(opt_host, self.state_shardings.opt_state)  # shapes: 1.5-2.4 s)
        else:
            if copy:
                params = self._copy(params)  # device_put may share buffers with its input
            opt_state = self._init_opt(params)
        step = jax.device_put(jnp.zeros((), jnp.int32), self.state_shardings.step)
        return TrainState(step, params, opt_state)

    def put_batch(self, batch: Mapping[str, Any]) -> DeviceBatch:
        """The batch's arrays on the mesh (leading dim on data×fsdp), with the loss positions
        per row its loss mask needs (``slots``), read from the host arrays before they move."""
        placed = DeviceBatch({k: jax.device_put(np.asarray(batch[k]) if not isinstance(batch[k], jax.Array)
                                                else batch[k], self.batch_sharding) for k in self.keys})
        placed.slots = self.slots_for(batch)
        return placed

    @property
    def keys(self) -> tuple[str, ...]:
        return self.objective.batch_keys if self.objective is not None else BATCH_KEYS

    def slots_for(self, batch: Mapping[str, Any]) -> int:
        """Loss positions per row the step keeps for ``batch`` (its length: no gathering).

        ``loss.loss_slots`` of the host loss mask; a batch spread over processes (not
        addressable here) keeps every position, so that all processes run the same program.
        """
        known = getattr(batch, "slots", None)
        if known is not None:
            return known
        masks = [batch[k] for k in mask_keys(self.keys)]
        length = int(np.shape(masks[0])[-1])
        if not self.gather_loss or any(isinstance(m, jax.Array) and not m.is_fully_addressable for m in masks):
            return length
        return max(loss_lib.loss_slots(np.asarray(m)) for m in masks)

    # -- steps
    def train_step(self, state: TrainState, batch: Mapping[str, Any]) -> tuple[TrainState, dict]:
        """One optimizer update; ``state`` is donated (do not reuse it)."""
        placed = _batch(batch, self.keys)
        return self._train(state, self.base_params, self.reference_params, placed, self.hparams,
                           self._slots(batch, "train", placed))

    def eval_step(self, trainable: Any, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """``{"loss_sum", "n_tokens", "weight"}`` and the objective's metric sums for one batch
        (device scalars): the eval loss over batches is Σ loss_sum / Σ weight."""
        placed = _batch(batch, self.keys)
        return self._eval(trainable, self.base_params, self.reference_params, placed, self.lora_runtime,
                          self._slots(batch, "eval", placed))

    def compile_eval_behind(self, batches: list[Mapping[str, Any]]) -> list[Any]:
        """With ``compile_behind``: the eval step's programs for ``batches`` (placed) compile in
        the background, so the first eval does not wait for them; the futures started."""
        if not self.compile_behind:
            return []
        futures = []
        for batch in batches:
            placed = _batch(batch, self.keys)
            f = self._eval.compile_behind(*self._abstract_args("eval", placed, self.slots_for(batch)))
            if f is not None:
                futures.append(f)
        return futures

    def evals_ready(self, batches: list[Mapping[str, Any]]) -> bool:
        """Whether the eval step runs each of ``batches`` (host or placed) with no compile in
        the foreground: its program compiled for the batch's loss positions, or for more (then
        ``_slots`` runs it there while its own compiles behind)."""
        program = self._eval
        for batch in batches:
            sig = program.signature(_batch(batch, self.keys), self.slots_for(batch))
            if not program.ready(sig) and _wider(program, sig) is None:
                return False
        return True

    def _slots(self, batch: Mapping[str, Any], kind: str, placed: Mapping[str, Any]) -> int:
        need = slots = self.slots_for(batch)
        program = self._train if kind == "train" else self._eval
        wider = None
        if self.compile_behind:
            sig = program.signature(placed, need)
            if not program.ready(sig):
                wider = _wider(program, sig)
                if wider is None and kind == "train" and (self.run_slots or 0) > need:
                    wider = self.run_slots  # compiled now: the widest the run needs
                if wider is not None:
                    program.compile_behind(*self._abstract_args(kind, placed, need))
                    slots = wider
        shape = (kind, tuple(np.shape(batch[mask_keys(self.keys)[0]])), slots)
        if shape not in self._compiled:
            self._compiled.add(shape)
            log.info("%s step for batch %s: loss on %d positions per row (compiles once per value)",
                     kind, shape[1], slots)
        if wider is not None and ("behind", *shape[:2], need) not in self._compiled:
            self._compiled.add(("behind", *shape[:2], need))
            log.info("%s step for batch %s: %d loss positions a row run in the compiled %d-position "
                     "program while theirs compiles in the background", kind, shape[1], need, wider)
        return slots

    def _abstract_args(self, kind: str, placed: Mapping[str, Any], slots: int) -> tuple:
        """A step's arguments for ``lower``: the state and the batch abstract (shapes, dtypes,
        shardings: nothing donated is held), the base and reference as they are."""
        batch = {k: jax.ShapeDtypeStruct(np.shape(v), v.dtype, sharding=getattr(v, "sharding", None))
                 for k, v in placed.items()}
        if kind == "train":
            return (self.abstract_state, self.base_params, self.reference_params, batch, self.hparams, slots)
        return (self.abstract_state.params, self.base_params, self.reference_params, batch, self.lora_runtime, slots)

    # -- introspection
    def compiled_memory(self, batch_shape: tuple[int, int], slots: int | None = None) -> dict[str, int]:
        """The compiled train step's memory analysis (bytes per device) for ``[B, L]``, with
        ``slots`` loss positions per row (default ``L``, every position: the most memory)."""
        abstract_batch = {k: jax.ShapeDtypeStruct(batch_shape, jnp.float32 if k.endswith("loss_mask") else jnp.int32,
                                                  sharding=self.batch_sharding) for k in self.keys}
        base = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            self.base_params, self.base_shardings)
        compiled = self.lower_train(abstract_batch, batch_shape[1] if slots is None else slots, base=base).compile()
        return memory_of(compiled)

    def lower_train(self, batch: Mapping[str, Any], slots: int, *, base: Any = None) -> Any:
        """The train step lowered for ``batch`` (arrays or ShapeDtypeStructs) and ``slots``."""
        return self._train.lower(self.abstract_state, self.base_params if base is None else base,
                                 self.reference_params, _batch(batch, self.keys), self.hparams, slots)


class DeviceBatch(dict):
    """A batch placed on the mesh (``Steps.put_batch``); ``slots``: its loss positions per row."""

    slots: int | None = None


def _host_device(tree: Any, mesh: Any) -> Any:
    """The host's CPU device when every leaf of ``tree`` lies on it and the mesh is elsewhere
    (an accelerator's: the values move, no buffer is shared); None otherwise."""
    leaves = jax.tree.leaves(tree)
    if not leaves or jax.process_count() != 1:
        return None
    mesh_devices = set(mesh.devices.flat)
    devices = set()
    for x in leaves:
        if not isinstance(x, jax.Array) or not x.is_fully_addressable:
            return None
        devices |= set(x.devices())
    if len(devices) != 1 or devices & mesh_devices:
        return None
    [device] = devices
    return device if device.platform == "cpu" else None


def memory_of(compiled: Any) -> dict[str, int]:
    m = compiled.memory_analysis()
    out = {
        "temp": int(m.temp_size_in_bytes),
        "argument": int(m.argument_size_in_bytes),
        "output": int(m.output_size_in_bytes),
        "alias": int(m.alias_size_in_bytes),
        "generated_code": int(m.generated_code_size_in_bytes),
    }
    out["total"] = out["temp"] + out["argument"] + out["output"] - out["alias"]
    return out


def mask_keys(keys: tuple[str, ...]) -> list[str]:
    """The loss masks among a batch's keys (``loss_mask``; DPO's ``chosen_``/``rejected_`` ones)."""
    return [k for k in keys if k.endswith("loss_mask")]


def _wider(program: Any, sig: tuple) -> int | None:
    """The fewest loss positions, more than ``sig``'s, of a program ready for ``sig``'s batch
    shapes (a narrower batch runs there while its own compiles behind), or None."""
    return min((s[0] for s in (*program.compiled, *program.called) if s[1] == sig[1] and s[0] > sig[0]),
               default=None)


def _batch(batch: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: batch[k] for k in keys}
