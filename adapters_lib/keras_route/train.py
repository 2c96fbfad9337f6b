"""``run_keras_training(cfg, run_dir, control=None, resume=False)``: the Keras route's trainer.

Same run directory and same promises as ``adapters_lib.train.loop.run_training``:
metrics.jsonl (step, loss, lr, grad_norm, tokens_per_s, step_time_s, tokens, eval_loss),
events.jsonl, status.json, checkpoints every ``checkpoint_every`` steps and on stop, exact
resume (the data of step k is ``pipeline.train_batch(k)``; weights, optimizer variables and
step come back from the checkpoint), exact-match before/after on the demo tasks.

``KerasTrainer`` implements the route methods of the one trainer loop (``train.trainer``:
the loop, state, events, metrics, errors, hooks, the resume point and the divergence error
are shared with the gemma route). Its ``step`` is ``keras.Model.fit`` over the loop's
segment (eval/checkpoint/final steps end one); a Keras callback records each step's metrics
and polls the trainer between steps. Per-step loss is recovered from fit's running mean (reset each segment);
the gradient norm (before clipping) is recorded by the optimizer into one of its variables.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.config import RunConfig, check_backend_options
from adapters_lib.keras_route import checkpoints
from adapters_lib.runs import RunDir
from adapters_lib.train.trainer import (
    ModelProbe,
    RouteSetup,
    Trainer,
    TrainResult,
    diverged,
    run_trainer,
)

log = logging.getLogger(__name__)


def _keras_batch(batch: dict[str, np.ndarray], backbone: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(x, y, sample_weight) for fit. The loss is reduced with "sum" over weights that sum to 1,
    so it is the loss_mask-weighted mean (the gemma route's loss) whatever mask Keras applies."""
    from adapters_lib.keras_route.backbones import model_inputs

    mask = batch["loss_mask"].astype(np.float32)
    weight = mask / max(float(mask.sum()), 1.0)
    positions = batch.get("positions")
    x = model_inputs(backbone, batch["tokens"].astype(np.int32), (batch["segment_ids"] != 0).astype(np.int32),
                     None if positions is None else positions.astype(np.int32))
    return x, batch["targets"].astype(np.int32), weight


def make_optimizer(keras: Any, spec: Any):
    """AdamW on the gemma route's schedule; no decay on bias/scale; records the gradient norm."""
    from adapters_lib.train.optimizer import _kind, make_schedule, schedule_hparams, schedule_value

    schedule_fn = make_schedule(spec)  # numpy, on the host: the logged learning rate
    hparams, kind = schedule_hparams(spec), _kind(spec)

    class Schedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):  # step: the optimizer's iterations Variable (traced in fit)
            return schedule_value(keras.ops.convert_to_tensor(step), hparams, kind)

        def get_config(self) -> dict[str, Any]:
            return {}

    class AdamW(keras.optimizers.AdamW):
        def build(self, variables):
            if self.built:
                return
            super().build(variables)
            self.grad_norm = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="grad_norm")

        def apply(self, grads, trainable_variables=None):
            ops = keras.ops
            total = sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads if g is not None)
            self.grad_norm.assign(ops.sqrt(total))
            return super().apply(grads, trainable_variables)

    opt = AdamW(learning_rate=Schedule(), weight_decay=spec.weight_decay, beta_1=0.9, beta_2=0.999,
                epsilon=1e-8, global_clipnorm=spec.clip_norm if spec.clip_norm > 0 else None, name="adamw")
    opt.exclude_from_weight_decay(var_names=["bias", "scale"])
    return opt, schedule_fn


class KerasTrainer(Trainer):
    """The Keras route: keras-hub Gemma + ``enable_lora``, ``fit`` in segments."""

    route = "keras"
    saves_on_interrupt = False  # fit's JAX state is not in the variables until fit returns

    def event(self, kind: str, **fields: Any) -> None:
        self.session.event(kind, **fields)

    # ---------------------------------------------------------------- set-up
    def setup(self) -> RouteSetup:
        from adapters_lib.data import build_pipeline
        from adapters_lib.keras_route.layout import make_distribution, plan_for
        from adapters_lib.keras_route.model import (
            build_model,
            import_keras,
            keras_source,
            model_dims,
        )

        cfg, t = self.cfg, self.cfg.train
        check_backend_options(cfg)
        if getattr(t, "objective", "sft") != "sft":
            from adapters_lib.errors import WorkbenchError

            raise WorkbenchError(f"the Keras route trains the sft objective only, not {t.objective!r}",
                                 where="[train] objective", hint='use model.backend = "gemma" for it')
        source = keras_source(cfg)  # the model source, resolved once
        self.plan = plan_for(cfg, model_dims(cfg, source))
        keras = import_keras()  # after the checks: a mistake is reported before the slow import
        self.distribution = make_distribution(self.plan)
        self.keras = keras
        self.model = build_model(cfg, self.distribution, source)
        lm = self.model.causal_lm
        with self._scope():  # optimizer variables must be made under the distribution too
            self.optimizer, self.schedule = make_optimizer(keras, t)
            lm.compile(optimizer=self.optimizer,
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum"),
                       weighted_metrics=[])
            self.optimizer.build(lm.trainable_variables)
        data = dataclasses.replace(cfg.data, packing=False)  # no segment ids in keras-hub Gemma
        self.pipeline = build_pipeline(data, self.model.tokenizer_path, batch_size=t.batch_size, seed=t.seed)
        self.event("setup", backend="keras", distribution=self.plan.kind, mesh=f"{self.plan.data}x{self.plan.tensor}",
                   notes=self.plan.notes + self.model.notes + (
                       ["packing off: Keras route trains one example per row"] if cfg.data.packing else []),
                   trainable_params=int(sum(np.prod(v.shape) for v in lm.trainable_variables)),
                   lora_layers=len(self.model.lora_layers))
        return RouteSetup(schedule=self.schedule,
                          has_eval=bool(self.pipeline.eval_batches(t.eval_batches)))

    def _scope(self) -> Any:
        from adapters_lib.keras_route.model import _nullcontext

        return self.distribution.scope() if self.distribution is not None else _nullcontext()

    # ---------------------------------------------------------------- pieces
    def evaluate(self) -> dict[str, float]:
        loss = self.eval_loss()
        return {} if loss is None else {"eval_loss": loss}

    def eval_loss(self) -> float | None:
        import jax
        import jax.numpy as jnp

        batches = self.pipeline.eval_batches(self.cfg.train.eval_batches)
        if not batches:
            return None
        lm = self.model.causal_lm
        if not hasattr(self, "_eval_fn"):
            def fn(tv, ntv, x, y, w):
                logits, _ = lm.stateless_call(tv, ntv, x)
                logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
                ce = -jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
                return jnp.sum(ce * w), jnp.sum(w)
            self._eval_fn = jax.jit(fn)
        tv = [v.value for v in lm.trainable_variables]
        ntv = [v.value for v in lm.non_trainable_variables]
        total = count = 0.0
        with self._scope():
            for b in batches:
                x, y, _ = _keras_batch(b, self.model.backbone)
                s, c = self._eval_fn(tv, ntv, x, y, b["loss_mask"].astype(np.float32))  # token-weighted
                total, count = total + float(s), count + float(c)
        return total / max(count, 1.0)

    def step(self, start: int, stop: int) -> dict[str, Any] | None:
        """Train steps start+1..stop with ``fit`` (fewer if the trainer's poll stops it); the
        record of ``stop`` comes back unwritten, None when it stopped earlier."""
        keras, trainer = self.keras, self
        pipeline, backbone = self.pipeline, self.model.backbone
        opt_vars = self.optimizer.variables
        norm_index = next(i for i, v in enumerate(opt_vars) if v is self.optimizer.grad_norm)

        class Data(keras.utils.PyDataset):
            def __len__(self) -> int:
                return stop - start

            def __getitem__(self, i: int):
                return _keras_batch(pipeline.train_batch(start + i), backbone)

        class Metrics(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.prev_mean, self.last, self.held = 0.0, time.perf_counter(), None

            def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
                k, step = batch + 1, start + batch + 1
                mean = float((logs or {})["loss"])
                loss = k * mean - (k - 1) * self.prev_mean
                self.prev_mean = mean
                if not math.isfinite(loss):
                    raise diverged(trainer.cfg, f"loss became {loss}", step)
                now = time.perf_counter()
                dt, self.last = now - self.last, now
                state = getattr(self.model, "_jax_state", None) or {}
                opt_state = state.get("optimizer_variables")
                grad_norm = float(opt_state[norm_index]) if opt_state else None
                n_tokens = int(np.count_nonzero(pipeline.train_batch(step - 1)["segment_ids"]))
                trainer.reached = step
                self.held = trainer.step_record(step, loss=loss, grad_norm=grad_norm, n_tokens=n_tokens,
                                                seconds=dt, hold=step == stop)
                if step < stop and trainer.poll():
                    self.model.stop_training = True

        cb = Metrics()
        with self._scope():
            keras.Model.fit(self.model.causal_lm, Data(), epochs=1, steps_per_epoch=stop - start,
                            verbose=0, callbacks=[cb], shuffle=False)
        return cb.held if self.reached == stop else None

    def probe(self) -> ModelProbe:
        """The model as trained so far, for hooks (``train.trainer.ModelProbe``)."""
        from adapters_lib.keras_route import generate

        model = self.model
        return ModelProbe(route=self.route, apply_fn=generate._apply_fn(model.causal_lm),
                          params=lambda: generate.params(model, base=False),
                          tokenizer=generate._sp(model), eval_examples=list(self.pipeline.eval_examples),
                          scope=self._scope, eval_loss=self.eval_loss,
                          trainable_params=int(sum(np.prod(v.shape)
                                                   for v in model.causal_lm.trainable_variables)))

    def restore(self, step: int) -> None:
        with self._scope():
            checkpoints.restore(self.run.checkpoints_dir, step, self.model.causal_lm)

    def save(self, step: int) -> bool:
        """Save ``step``; every loss up to it is known finite, so older checkpoints are confirmed."""
        directory = self.run.checkpoints_dir
        checkpoints.prune(directory, self.cfg.train.keep_checkpoints, step, self.session.pinned)
        try:
            checkpoints.save(directory, step, self.model.causal_lm, loss=self.result.losses.get(step))
        except checkpoints.NonFiniteState:
            raise diverged(self.cfg, "the trained values became NaN or infinite", step + 1) from None
        return True

    def finish(self, done: bool) -> None:
        if done:  # every checkpoint is good
            checkpoints.prune(self.run.checkpoints_dir, self.cfg.train.keep_checkpoints, None,
                              self.session.pinned)

    def discard_from(self, step: int) -> list[int]:
        return checkpoints.discard_from(self.run.checkpoints_dir, step)


def run_keras_training(cfg: RunConfig, run_dir: str | Path | RunDir, *, control: Any = None,
                       resume: bool = False, hooks: Any = ()) -> TrainResult:
    """Train ``cfg`` (``model.backend = "keras"``) in ``run_dir``; returns a ``TrainResult``."""
    return run_trainer(KerasTrainer, cfg, run_dir, control=control, resume=resume, hooks=hooks)
