"""The jitted train and eval steps for gemma models (targeted LoRA or full fine-tune).

``build_steps(model, cfg, optimizer, mesh, base_params, trainable_params) -> Steps``:

- the loss is Σ CE·loss_mask / Σ loss_mask over the global batch (all micro-batches),
  with a chunked cross-entropy over the final hidden states (``loss.py``), so the
  ``[B, L, V]`` logits are never materialised, and only at the loss-bearing positions:
  each row's are gathered before the output projection (``loss.gather_loss_positions``),
  ``slots`` per row, a bound read from the host loss mask and rounded up to an eighth of
  the length (``loss.loss_slots``): the step compiles once per value, at most 8 per shape;
- the attention mask comes from ``segment_ids`` (causal, same packed example), positions
  from the batch;
- the attention scores are computed in blocks that skip the masked-out ones (causal and
  sliding-window; ``attention.py``), the same values as gemma's dense scores; on a GPU
  one fused cuDNN ``dot_product_attention`` instead, on a TPU the Pallas splash kernel
  (``attention_splash``; ``build_steps(attention_kind=)``);
- ``train.remat`` rematerialises every transformer block in the backward pass;
- ``train.compute_dtype = "bfloat16"`` casts params (base and trainable) inside the step;
  gradients, optimizer state and the trainable params stay in their own dtype;
- ``train.grad_accum`` splits the global batch (``train.batch_size`` rows) into that many
  micro-batches, run by ``lax.scan``; one optimizer update per step;
- the base params are a separate, frozen argument: never differentiated, never donated;
- the train state is donated; every input and output has an explicit sharding;
- metrics are device scalars (no host sync inside the step): ``loss``, ``grad_norm``,
  ``n_tokens``, and the objective's own (``objective.metrics``, e.g. DPO's reward margin).

The loss is the objective's (``train.objectives``: ``sft`` by default, ``dpo``): the step
gives it ``Forward`` — the chunked cross-entropy at the loss positions under the trained
params, and for an objective that needs one the reference's (the same base params with the
adapters off: no second copy of the weights; or another run's adapters, ``reference_params``)
— and divides its sums by ``objective.weight`` of the global batch.

Batch contract: a dict of the objective's ``batch_keys`` (SFT: ``tokens``, ``targets``,
``loss_mask``, ``positions``, ``segment_ids``), each ``[batch_size, L]`` (extra keys are ignored).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

from adapters_lib import mesh as mesh_lib
from adapters_lib.config import RunConfig
from adapters_lib.import_shields import trace_context
from adapters_lib.kernels import ce_splash
from adapters_lib.lora import family as lora_family
from adapters_lib.lora import targeted as lora
from adapters_lib.memory import estimate as memory_estimate
from adapters_lib.train import attention, objectives, step_programs
from adapters_lib.train import loss as loss_lib
from adapters_lib.train.compiled_steps import Steps, TrainState, mask_keys
from adapters_lib.train.variants import with_remat, with_training_attention

log = logging.getLogger(__name__)
trace_context.complete()  # before any program is traced: see trace_context


def _cast(tree: Any, dtype: Any) -> Any:
    def one(x):
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype else x
    return jax.tree.map(one, tree)


def build_steps(model: nn.Module, cfg: RunConfig, optimizer: optax.GradientTransformation, mesh: Any,
                base_params: Any, trainable_params: Any, *, ce_chunk: int | None = None,
                ce_chunk_bytes: int | None = None, seq_len: int | None = None,
                gather_loss: bool = True, attention_kind: str | None = None, objective: Any = None,
                reference_params: Any = None, weight_barrier: bool | None = None,
                ce_kernel: str | None = None, slot_major_mlp: bool | None = None,
                compile_behind: bool | None = None, family: Any = None) -> Steps:
    """Jitted steps for ``model`` (the unwrapped gemma Transformer) under ``cfg``.

    ``base_params``: the frozen base tree (ignored for a full fine-tune, where
    ``trainable_params`` is every param). ``trainable_params``: the adapters
    (``lora.init_lora``) or the full params; arrays or ShapeDtypeStructs (only shapes are used).
    ``ce_chunk``: positions per cross-entropy chunk (default: the longest divisor of the
    sequence length whose per-device f32 logits fit ``ce_chunk_bytes``; needs ``seq_len``,
    else ``data.max_length``). ``ce_chunk_bytes``: default ``loss.ce_chunk_budget`` of the
    mesh's devices (128 MiB on CPU, 1/64 of an accelerator's memory). ``gather_loss``: the
    logits only at the loss-bearing positions (default), else at every position.
    ``attention_kind``: ``attention.KINDS``; default ``attention.default_kind`` of the platform
    (cuDNN flash attention on a GPU, block-sparse scores elsewhere).
    ``weight_barrier``: ``variants.with_training_attention``'s (default: on a CPU only).
    ``slot_major_mlp``: its ``slot_major`` (the feed-forward's gate/up output ``[2, B, T, F]``;
    default: on a TPU only).
    ``ce_kernel``: ``loss.CE_KERNELS``, how the cross-entropy is computed (default ``"flash"``
    on a TPU, else ``"xla"``, the chunked matmuls); ``"flash"`` (the project's Pallas kernel,
    ``ce_flash``) and ``"splash"`` (JAX's splash attention kernel) never write logits to
    memory (``ce_splash``; meant for a TPU: elsewhere they run interpreted, slowly) — for a
    LoRA run without a soft-cap on a float table whose vocabulary is not split over
    ``tensor``; otherwise ``"xla"`` (``Steps.ce_kernel`` says which). Per-row sums (DPO) keep
    ``"xla"``. BENCHMARKS.md ("TPU v5e") has the three side by side.
    ``compile_behind``: ``Steps.compile_behind`` (default: on an accelerator, one process;
    ``GEMMA_WORKBENCH_COMPILE_BEHIND=1``/``0`` forces it, e.g. a CPU test of the accelerator path).
    ``objective``: default ``objectives.for_config(cfg)``. ``reference_params``: adapters
    (the shapes of ``trainable_params``) of the reference model for an objective that needs
    one; default the base with the adapters off.
    ``family``: a ``lora.family.LoraFamily`` — the program is its ``program`` spec (the rank
    bucket, every target, scale 1) and ``trainable_params`` have its shapes; the run's rank, alpha
    and targets are step inputs (``Steps.lora_runtime``, ``lora.family.apply_runtime``), so the
    next run of the family compiles nothing. None: the run's own spec (``cfg.lora``) is compiled.
    """
    t = cfg.train
    full_ft = not cfg.lora.enabled
    compute_dtype = jnp.dtype(t.compute_dtype)
    accum = t.grad_accum
    config = model.config
    softcap = config.final_logit_softcap

    split_vocab = loss_lib.ce_split_vocab(mesh.devices.flat[0])
    ce_kernel = _ce_kernel(ce_kernel, full_ft=full_ft, softcap=softcap, config=config, mesh=mesh,
                           table=(base_params or {}).get("embedder", {}).get("input_embedding"))
    if attention_kind is None:
        attention_kind = attention.default_kind(mesh.devices.flat[0].platform)
    run_model = with_remat(model) if t.remat else model
    plain_model = with_training_attention(run_model, attention_kind, mesh, weight_barrier, slot_major_mlp)
    if family is not None and (full_ft or reference_params is not None):
        raise ValueError("a LoRA program family trains adapters against the base (no full fine-tune, "
                         "no reference run)")
    run_model = lora.wrap(plain_model, family.program if family is not None else cfg.lora)
    if objective is None:
        objective = objectives.for_config(cfg)
    keys = objective.batch_keys

    sizes = mesh_lib.mesh_sizes(mesh)
    dp = sizes["data"] * sizes["fsdp"]
    length = seq_len or cfg.data.max_length
    if ce_chunk is None:
        if ce_chunk_bytes is None:
            ce_chunk_bytes = memory_estimate.ce_chunk_budget(mesh.devices.flat[0])
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
    batch_shardings = {k: batch_sharding for k in keys}
    if objective.needs_reference and full_ft:
        from adapters_lib.errors import WorkbenchError

        raise WorkbenchError(f"objective {objective.name!r} needs LoRA: its reference is the base "
                             "with the adapters off", where="[lora] enabled",
                             hint="set lora.enabled = true (a full fine-tune would need a second copy "
                                  "of the base as its reference)")
    reference_params = reference_params if reference_params is not None else {}
    reference_shardings = mesh_lib.params_shardings(mesh, reference_params, config=config)
    if all(isinstance(x, jax.Array) for x in jax.tree.leaves(reference_params)):
        reference_params = jax.device_put(reference_params, reference_shardings)

    def params_for(trainable, base, lrt):
        if family is not None:  # the run's rank, targets and scale: runtime values
            trainable = lora_family.apply_runtime(trainable, lrt)
        trainable = _cast(trainable, compute_dtype)
        if full_ft:
            return trainable
        return lora.merge_lora(_cast(base, compute_dtype), trainable)

    def ce(model, params, mb, slots, per_row):
        """Σ CE at the loss positions of ``mb`` under ``params`` (a scalar, or ``[rows]``)."""
        mask = loss_lib.attention_mask(mb["segment_ids"])
        out = model.apply({"params": params}, mb["tokens"], positions=mb["positions"],
                          attention_mask=mask, return_hidden_states=True)
        hidden, targets, weights = out.hidden_states, mb["targets"], mb["loss_mask"]
        if slots < hidden.shape[1]:  # logits only where the loss is
            hidden, targets, weights = loss_lib.gather_loss_positions(hidden, targets, weights, slots)
        table = params["embedder"]["input_embedding"]
        chunk = _divisor_at_most(hidden.shape[1], ce_chunk)

        def one(h, t, w, kernel="xla"):
            return loss_lib.chunked_ce_sum(h, table, t, w, softcap=softcap, chunk=chunk, split_vocab=split_vocab,
                                           kernel=kernel, mesh=mesh)

        if per_row:
            return jax.vmap(lambda h, t, w: one(h[None], t[None], w[None]))(hidden, targets, weights)
        return one(hidden, targets, weights, ce_kernel)

    def loss_sum(trainable, base, ref, lrt, mb, slots):
        def policy(b, per_row=False):
            return ce(run_model, params_for(trainable, base, lrt), b, slots, per_row)

        def reference(b):
            base_c = _cast(jax.lax.stop_gradient(base), compute_dtype)
            if ref:  # another run's adapters
                return ce(run_model, lora.merge_lora(base_c, _cast(ref, compute_dtype)), b, slots, True)
            return ce(plain_model, base_c, b, slots, True)  # the base: adapters off

        fwd = objectives.Forward(policy=policy, reference=reference if objective.needs_reference else None)
        return objective.loss(fwd, mb)

    grad_fn = jax.value_and_grad(loss_sum, has_aux=True)

    def grads_of(trainable, base, ref, lrt, batch, slots):
        if accum == 1:
            return grad_fn(trainable, base, ref, lrt, batch, slots)
        rows = batch["tokens"].shape[0]

        def micro(x):  # [A·b, L] → [A, b, L]; row r goes to micro-batch r % A (no data moves)
            x = x.reshape(rows // accum, accum, *x.shape[1:]).swapaxes(0, 1)
            return jax.lax.with_sharding_constraint(x, micro_sharding)

        micro_batches = {k: micro(v) for k, v in batch.items()}
        zeros = jax.tree.map(jnp.zeros_like, trainable)
        zeros = jax.lax.with_sharding_constraint(zeros, trainable_shardings)

        def body(carry, mb):
            total, aux, acc = carry
            (value, mb_aux), g = grad_fn(trainable, base, ref, lrt, mb, slots)
            acc = jax.tree.map(jnp.add, acc, g)
            acc = jax.lax.with_sharding_constraint(acc, trainable_shardings)
            return (total + value, jax.tree.map(jnp.add, aux, mb_aux), acc), None

        aux0 = {k: jnp.zeros((), jnp.float32) for k in objective.metrics}
        (total, aux, grads), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), aux0, zeros), micro_batches)
        return (total, aux), grads

    # the schedule's numbers are inputs of the step (one program for any learning rate and run
    # length) when the optimizer is ours (``optimizer.Scheduled``); another optax one is used as is
    scheduled = getattr(optimizer, "at", None)
    hparams = {k: jax.device_put(jnp.float32(v), rep) for k, v in optimizer.hparams.items()} \
        if scheduled else {}
    lora_runtime = jax.device_put(family.runtime(), rep) if family is not None else {}

    def train_fn(state: TrainState, base, ref, batch, hp, slots):
        hp = dict(hp)
        lrt = hp.pop("lora", {})  # the family's runtime values (``lora.family``), beside the schedule's
        opt = scheduled(hp) if scheduled else optimizer
        n_tokens = sum(jnp.sum(batch[k].astype(jnp.float32)) for k in mask_keys(keys))
        denom = jnp.maximum(objective.weight(batch), 1.0)
        (total, aux), grads = grads_of(state.params, base, ref, lrt, batch, slots)
        grads = jax.tree.map(lambda g: g / denom.astype(g.dtype), grads)
        grads = jax.lax.with_sharding_constraint(grads, trainable_shardings)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": total / denom, "grad_norm": optax.tree.norm(grads), "n_tokens": n_tokens,
                   **{k: v / denom for k, v in aux.items()}}
        return TrainState(state.step + 1, params, opt_state), metrics

    def eval_fn(trainable, base, ref, batch, lrt, slots):
        total, aux = loss_sum(trainable, base, ref, lrt, batch, slots)
        return {"loss_sum": total, "n_tokens": sum(jnp.sum(batch[k].astype(jnp.float32)) for k in mask_keys(keys)),
                "weight": objective.weight(batch), **aux}

    metric_names = ("loss", "grad_norm", "n_tokens", *objective.metrics)
    metric_shardings = {k: rep for k in metric_names}
    eval_shardings = {k: rep for k in ("loss_sum", "n_tokens", "weight", *objective.metrics)}

    def make_programs():
        # ``slots`` (static): loss positions kept per row (``loss.loss_slots``), one program per value
        train_jit = jax.jit(train_fn, in_shardings=(state_shardings, base_shardings, reference_shardings,
                                                    batch_shardings, jax.tree.map(lambda _: rep, step_hparams)),
                            out_shardings=(state_shardings, metric_shardings), donate_argnums=(0,),
                            static_argnums=(5,))
        eval_jit = jax.jit(eval_fn, in_shardings=(trainable_shardings, base_shardings, reference_shardings,
                                                  batch_shardings, jax.tree.map(lambda _: rep, lora_runtime)),
                           out_shardings=eval_shardings, static_argnums=(5,))
        init_opt = jax.jit(optimizer.init, in_shardings=(trainable_shardings,), out_shardings=opt_shardings)
        copy = jax.jit(lambda tree: jax.tree.map(lambda x: jnp.array(x, copy=True), tree),
                       in_shardings=(trainable_shardings,), out_shardings=trainable_shardings)
        return (step_programs.StepProgram(train_jit, "train_step", key),
                step_programs.StepProgram(eval_jit, "eval_step", key), init_opt, copy)

    # an earlier run of the same shapes in this process left its programs: reuse them (no trace)
    step_hparams = {**hparams, "lora": lora_runtime} if family is not None else hparams
    key_cfg = dataclasses.replace(cfg, lora=family.program) if family is not None else cfg
    key = step_programs.program_key(model, key_cfg, mesh, trainable_params, base_params, optimizer=optimizer,
                                    length=length, ce_chunk=ce_chunk, gather_loss=gather_loss,
                                    attention_kind=attention_kind, ce_kernel=ce_kernel)
    if key is not None:  # the objective's constants (DPO's beta, …) and its reference are in the program
        key += (weight_barrier, slot_major_mlp, objective.name, tuple(sorted((k, repr(v)) for k, v in vars(objective).items())),
                step_programs.tree_signature(reference_params))
    train_jit, eval_jit, init_opt, copy = step_programs.kept(key, make_programs)

    steps = Steps(model=run_model, mesh=mesh, optimizer=optimizer, base_params=base_params,
                  trainable_shardings=trainable_shardings, base_shardings=base_shardings,
                  state_shardings=state_shardings, batch_sharding=batch_sharding, ce_chunk=ce_chunk,
                  abstract_state=abstract_state, _train=train_jit, _eval=eval_jit, _init_opt=init_opt,
                  _copy=copy, gather_loss=gather_loss, attention_kind=attention_kind, ce_kernel=ce_kernel,
                  hparams=step_hparams, lora_runtime=lora_runtime, family=family,
                  objective=objective, reference_params=reference_params)
    if compile_behind is None:
        forced = os.environ.get("GEMMA_WORKBENCH_COMPILE_BEHIND", "").strip().lower()
        compile_behind = forced in ("1", "on", "true") if forced else \
            mesh.devices.flat[0].platform != "cpu" and jax.process_count() == 1
    steps.compile_behind = bool(compile_behind)
    return steps


def _ce_kernel(kind: str | None, *, full_ft: bool, softcap: float | None, config: Any, mesh: Any,
               table: Any = None) -> str:
    """The cross-entropy kernel the step uses: ``kind`` (default ``"flash"`` on a TPU, ``"xla"``
    elsewhere: Pallas' interpreter off a TPU is slow), or ``"xla"`` where the kernel cannot
    serve the whole run (the shapes of each call are checked again by
    ``loss.chunked_ce_sum``, which falls back on its own)."""
    if kind is None:
        kind = "flash" if mesh.devices.flat[0].platform == "tpu" else "xla"
    if kind not in loss_lib.CE_KERNELS:
        raise ValueError(f"ce_kernel {kind!r}: expected one of {loss_lib.CE_KERNELS}")
    if kind not in ce_splash.KERNELS:
        return kind
    why = "a full fine-tune trains the table" if full_ft else ce_splash.why_not_run(
        softcap, table, config.embed_dim, config.num_embed, mesh)
    if why:
        log.debug("cross-entropy: the %s kernel does not apply (%s); XLA's chunked path", kind, why)
        return "xla"
    return kind


def _divisor_at_most(n: int, k: int) -> int:
    return max(d for d in range(1, min(n, k) + 1) if n % d == 0)
