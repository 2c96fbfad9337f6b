"""The jitted train and eval steps for gemma models (targeted LoRA or full fine-tune).

``build_steps(model, cfg, optimizer, mesh, base_params, trainable_params) -> Steps``:

- the loss is Σ CE·loss_mask / Σ loss_mask over the global batch (all micro-batches),
  with a chunked cross-entropy over the final hidden states (``loss.py``), so the
  ``[B, L, V]`` logits are never materialised;
- the attention mask comes from ``segment_ids`` (causal, same packed example), positions
  from the batch;
- the attention scores are computed in blocks that skip the masked-out ones (causal and
  sliding-window; ``attention.py``), the same values as gemma's dense scores;
- ``train.remat`` rematerialises every transformer block in the backward pass;
- ``train.compute_dtype = "bfloat16"`` casts params (base and trainable) inside the step;
  gradients, optimizer state and the trainable params stay in their own dtype;
- ``train.grad_accum`` splits the global batch (``train.batch_size`` rows) into that many
  micro-batches, run by ``lax.scan``; one optimizer update per step;
- the base params are a separate, frozen argument: never differentiated, never donated;
- the train state is donated; every input and output has an explicit sharding;
- metrics are device scalars (no host sync inside the step): ``loss``, ``grad_norm``,
  ``n_tokens``.

Batch contract: a dict of ``tokens``, ``targets``, ``loss_mask``, ``positions``,
``segment_ids``, each ``[batch_size, L]`` (extra keys are ignored).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from adapters_lib import attention, lora
from adapters_lib import mesh as mesh_lib
from adapters_lib.config import RunConfig
from adapters_lib.train import loss as loss_lib

log = logging.getLogger(__name__)

BATCH_KEYS = ("tokens", "targets", "loss_mask", "positions", "segment_ids")


class TrainState(NamedTuple):
    """What the train step carries (and donates) from step to step."""

    step: jax.Array
    """int32 scalar: optimizer updates applied so far."""
    params: Any
    """The trainable params: the adapters, or every param for a full fine-tune."""
    opt_state: Any


# --------------------------------------------------------------------------- remat


def _run_block(block: nn.Module, x: jax.Array, positions: jax.Array, mask: jax.Array) -> jax.Array:
    return block(x, positions, None, mask)[1]


@functools.cache
def _remat_class(cls: type) -> type:
    def _apply_attention(self, inputs, cache):
        if cache is not None:  # sampling with a KV cache: nothing to rematerialise
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
    return _rebuild_as(model, _remat_class(type(model)))


def _rebuild_as(model: nn.Module, cls: type) -> nn.Module:
    """``model``'s fields in a (subclass) ``cls``: a module that traces apart from ``model``."""
    kwargs = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    return cls(**kwargs)


@functools.cache
def _blocked_class(cls: type) -> type:
    def _apply_attention(self, inputs, cache):
        if cache is not None:  # sampling: gemma's own attention
            return super(new_cls, self)._apply_attention(inputs, cache)
        with attention.blocked():
            return super(new_cls, self)._apply_attention(inputs, cache)

    new_cls = type(f"{cls.__name__}Blocked", (cls,), {
        "_apply_attention": _apply_attention, "__module__": cls.__module__})
    return new_cls


def with_blocked_attention(model: nn.Module) -> nn.Module:
    """The same gemma Transformer with block-sparse attention scores (``attention.py``).

    A subclass, not a context around ``apply``: gemma's ``Transformer.__call__`` is an
    ``nn.jit`` keyed on the module, so an equal module would reuse a dense trace.
    """
    if not hasattr(type(model), "_apply_attention"):
        return model
    return _rebuild_as(model, _blocked_class(type(model)))


# --------------------------------------------------------------------------- the steps


def _cast(tree: Any, dtype: Any) -> Any:
    def one(x):
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype else x
    return jax.tree.map(one, tree)


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

    # -- state
    def init_state(self, trainable_params: Any, *, copy: bool = True) -> TrainState:
        """A fresh state on the mesh: step 0, the params placed, the optimizer initialised.

        The state is donated to the train step, so by default the params are copied and the
        caller's arrays stay valid; ``copy=False`` hands them over (saves one copy of the
        trainable params: worth it for a full fine-tune) and they die at the first step.
        """
        params = jax.device_put(trainable_params, self.trainable_shardings)
        if copy:
            params = self._copy(params)  # device_put may share buffers with its input
        opt_state = self._init_opt(params)
        step = jax.device_put(jnp.zeros((), jnp.int32), self.state_shardings.step)
        return TrainState(step, params, opt_state)

    def put_batch(self, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The batch's arrays on the mesh (leading dim on data×fsdp)."""
        return {k: jax.device_put(np.asarray(batch[k]) if not isinstance(batch[k], jax.Array)
                                  else batch[k], self.batch_sharding) for k in BATCH_KEYS}

    # -- steps
    def train_step(self, state: TrainState, batch: Mapping[str, Any]) -> tuple[TrainState, dict]:
        """One optimizer update; ``state`` is donated (do not reuse it)."""
        return self._train(state, self.base_params, _batch(batch))

    def eval_step(self, trainable: Any, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """``{"loss_sum", "n_tokens"}`` for one batch (device scalars)."""
        return self._eval(trainable, self.base_params, _batch(batch))

    # -- introspection
    def compiled_memory(self, batch_shape: tuple[int, int]) -> dict[str, int]:
        """The compiled train step's memory analysis (bytes per device) for ``[B, L]``."""
        abstract_batch = {k: jax.ShapeDtypeStruct(batch_shape, jnp.float32 if k == "loss_mask" else jnp.int32,
                                                  sharding=self.batch_sharding) for k in BATCH_KEYS}
        base = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            self.base_params, self.base_shardings)
        compiled = self._train.lower(self.abstract_state, base, abstract_batch).compile()
        return memory_of(compiled)


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


def _batch(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: batch[k] for k in BATCH_KEYS}


def build_steps(model: nn.Module, cfg: RunConfig, optimizer: optax.GradientTransformation, mesh: Any,
                base_params: Any, trainable_params: Any, *, ce_chunk: int | None = None,
                ce_chunk_bytes: int | None = None, seq_len: int | None = None) -> Steps:
    """Jitted steps for ``model`` (the unwrapped gemma Transformer) under ``cfg``.

    ``base_params``: the frozen base tree (ignored for a full fine-tune, where
    ``trainable_params`` is every param). ``trainable_params``: the adapters
    (``lora.init_lora``) or the full params; arrays or ShapeDtypeStructs (only shapes are used).
    ``ce_chunk``: positions per cross-entropy chunk (default: the longest divisor of the
    sequence length whose per-device f32 logits fit ``ce_chunk_bytes``; needs ``seq_len``,
    else ``data.max_length``). ``ce_chunk_bytes``: default ``loss.ce_chunk_budget`` of the
    mesh's devices (128 MiB on CPU, 1/64 of an accelerator's memory).
    """
    t = cfg.train
    full_ft = not cfg.lora.enabled
    compute_dtype = jnp.dtype(t.compute_dtype)
    accum = t.grad_accum
    config = model.config
    softcap = config.final_logit_softcap

    run_model = with_remat(model) if t.remat else model
    run_model = lora.wrap(with_blocked_attention(run_model), cfg.lora)

    sizes = mesh_lib.mesh_sizes(mesh)
    dp = sizes["data"] * sizes["fsdp"]
    length = seq_len or cfg.data.max_length
    if ce_chunk is None:
        if ce_chunk_bytes is None:
            ce_chunk_bytes = loss_lib.ce_chunk_budget(mesh.devices.flat[0])
        micro_rows = max(1, t.batch_size // accum // dp)
        vocab = config.num_embed
        if vocab % sizes["tensor"] == 0:
            vocab //= sizes["tensor"]
        ce_chunk = loss_lib.chunk_length(length, micro_rows, vocab, ce_chunk_bytes)

    if full_ft:
        base_params = {}
    trainable_shardings = mesh_lib.params_shardings(mesh, trainable_params, config=config)
    base_shardings = mesh_lib.params_shardings(mesh, base_params, config=config)
    if all(isinstance(x, jax.Array) for x in jax.tree.leaves(base_params)):
        base_params = jax.device_put(base_params, base_shardings)
    # else abstract (ShapeDtypeStructs): enough for compiled_memory, not for running
    rep = mesh_lib.replicated(mesh)
    batch_sharding = mesh_lib.batch_sharding(mesh)
    micro_sharding = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(None, mesh_lib.BATCH_AXES, None))

    abstract_trainable = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                      trainable_params, trainable_shardings)
    opt_shapes = jax.eval_shape(optimizer.init, abstract_trainable)
    opt_shardings = mesh_lib.like_params_shardings(mesh, opt_shapes, trainable_shardings)
    state_shardings = TrainState(rep, trainable_shardings, opt_shardings)
    abstract_state = TrainState(
        jax.ShapeDtypeStruct((), jnp.int32, sharding=rep), abstract_trainable,
        jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), opt_shapes, opt_shardings))
    batch_shardings = {k: batch_sharding for k in BATCH_KEYS}

    def params_for(trainable, base):
        trainable = _cast(trainable, compute_dtype)
        if full_ft:
            return trainable
        return lora.merge_lora(_cast(base, compute_dtype), trainable)

    def loss_sum(trainable, base, mb):
        params = params_for(trainable, base)
        mask = loss_lib.attention_mask(mb["segment_ids"])
        out = run_model.apply({"params": params}, mb["tokens"], positions=mb["positions"],
                              attention_mask=mask, return_hidden_states=True)
        table = params["embedder"]["input_embedding"]
        return loss_lib.chunked_ce_sum(out.hidden_states, table, mb["targets"], mb["loss_mask"],
                                       chunk=_divisor_at_most(mb["tokens"].shape[1], ce_chunk),
                                       softcap=softcap)

    grad_fn = jax.value_and_grad(loss_sum)

    def grads_of(trainable, base, batch):
        if accum == 1:
            return grad_fn(trainable, base, batch)
        rows = batch["tokens"].shape[0]

        def micro(x):  # [A·b, L] → [A, b, L]; row r goes to micro-batch r % A (no data moves)
            x = x.reshape(rows // accum, accum, *x.shape[1:]).swapaxes(0, 1)
            return jax.lax.with_sharding_constraint(x, micro_sharding)

        micro_batches = {k: micro(v) for k, v in batch.items()}
        zeros = jax.tree.map(jnp.zeros_like, trainable)
        zeros = jax.lax.with_sharding_constraint(zeros, trainable_shardings)

        def body(carry, mb):
            total, acc = carry
            value, g = grad_fn(trainable, base, mb)
            acc = jax.tree.map(jnp.add, acc, g)
            acc = jax.lax.with_sharding_constraint(acc, trainable_shardings)
            return (total + value, acc), None

        (total, grads), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), micro_batches)
        return total, grads

    def train_fn(state: TrainState, base, batch):
        n_tokens = jnp.sum(batch["loss_mask"].astype(jnp.float32))
        denom = jnp.maximum(n_tokens, 1.0)
        total, grads = grads_of(state.params, base, batch)
        grads = jax.tree.map(lambda g: g / denom.astype(g.dtype), grads)
        grads = jax.lax.with_sharding_constraint(grads, trainable_shardings)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": total / denom, "grad_norm": optax.tree.norm(grads), "n_tokens": n_tokens}
        return TrainState(state.step + 1, params, opt_state), metrics

    def eval_fn(trainable, base, batch):
        return {"loss_sum": loss_sum(trainable, base, batch),
                "n_tokens": jnp.sum(batch["loss_mask"].astype(jnp.float32))}

    metric_shardings = {"loss": rep, "grad_norm": rep, "n_tokens": rep}
    train_jit = jax.jit(train_fn, in_shardings=(state_shardings, base_shardings, batch_shardings),
                        out_shardings=(state_shardings, metric_shardings), donate_argnums=(0,))
    eval_jit = jax.jit(eval_fn, in_shardings=(trainable_shardings, base_shardings, batch_shardings),
                       out_shardings={"loss_sum": rep, "n_tokens": rep})
    init_opt = jax.jit(optimizer.init, in_shardings=(trainable_shardings,), out_shardings=opt_shardings)
    copy = jax.jit(lambda tree: jax.tree.map(lambda x: jnp.array(x, copy=True), tree),
                   in_shardings=(trainable_shardings,), out_shardings=trainable_shardings)

    steps = Steps(model=run_model, mesh=mesh, optimizer=optimizer, base_params=base_params,
                  trainable_shardings=trainable_shardings, base_shardings=base_shardings,
                  state_shardings=state_shardings, batch_sharding=batch_sharding, ce_chunk=ce_chunk,
                  abstract_state=abstract_state, _train=train_jit, _eval=eval_jit, _init_opt=init_opt,
                  _copy=copy)
    return steps


def _divisor_at_most(n: int, k: int) -> int:
    return max(d for d in range(1, min(n, k) + 1) if n % d == 0)
