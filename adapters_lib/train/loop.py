"""The training loop: a run directory in, a trained adapter (checkpoints, metrics) out.

``run_training(cfg, run_dir, control=None, resume=False, hooks=())`` runs a config on its
route behind the one trainer interface (``train.trainer``: state, events, metrics, errors,
hooks): ``GemmaTrainer`` here, ``keras_route.train.KerasTrainer`` for ``backend = "keras"``.
The gemma route:

1. loads the base model on the mesh, makes the trainable tree (fresh LoRA adapters, or every
   param for a full fine-tune), the optimizer and the jitted steps (``train.step``);
2. on ``resume`` restores the newest checkpoint (params, optimizer state, RNG; the data
   position is the step) and drops metric lines past it;
3. for each step feeds ``pipeline.train_batch(step)``. The host does not wait for the device
   between steps: per-step metrics stay on device and are fetched together every
   ``log_every`` steps, one step behind (``jax.device_get`` of a small dict). A non-finite
   loss stops the run (``failed``) and deletes checkpoints made from the diverged params
   (retention waits for a checkpoint to be confirmed, so one good checkpoint always stays);
4. writes ``metrics.jsonl`` (step numbers count updates: step k is the k-th update),
   ``events.jsonl`` and ``status.json`` (see ``adapters_lib.runs``) and checkpoints every
   ``checkpoint_every`` steps, on stop and at the end;
5. hands the hooks the model as trained so far (``session.probe``) when it starts and at each
   eval step: the evaluation area's hooks (``train.trainer.config_hooks``) score the task
   metrics into eval.jsonl — exact-match on the demo data before and after training, as
   before — keep the best checkpoint (a checkpoint at an eval step a hook asks for) and stop
   early.

``control`` (the engine's TrainControl) is polled between steps: ``should_stop()`` ends the
run as ``stopped`` after a checkpoint; ``between_steps()`` lets the engine serve sampling;
``on_metrics(record)`` / ``on_event(record)`` receive what is written to the run dir. Hooks
see the same records (``TrainHook.on_step``/``on_eval``/``on_checkpoint``/``should_stop``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from adapters_lib.config import RunConfig
from adapters_lib.runs import RunDir
from adapters_lib.train.trainer import (
    ModelProbe,
    NullControl,
    RunSession,
    TrainControl,
    Trainer,
    TrainHook,
    TrainingDiverged,
    TrainResult,
    diverged,
    finite,
    run_trainer,
)

__all__ = ["GemmaTrainer", "NullControl", "TrainControl", "TrainHook", "TrainResult",
           "TrainingDiverged", "run_training"]

log = logging.getLogger(__name__)

_finite = finite  # the old private name


def run_training(cfg: RunConfig, run_dir: str | Path | RunDir, *, control: Any = None,
                 resume: bool = False, hooks: Iterable[TrainHook] = ()) -> TrainResult:
    """Train ``cfg`` in ``run_dir`` (made by ``runs.create_run``) on its route. See the module
    docstring and ``train.trainer.run_trainer``.

    Raises ``WorkbenchError`` for a mistake in the config or data (the run is marked
    ``failed`` with the same one-line cause), ``TrainingDiverged`` for a NaN/inf loss,
    ``runs.RunOwned`` when another live process trains the run.
    A ``KeyboardInterrupt`` is taken as a stop: checkpoint, ``stopped``, and the result.
    """
    if cfg.model.backend == "keras":
        from adapters_lib.keras_route.train import KerasTrainer

        return run_trainer(KerasTrainer, cfg, run_dir, control=control, resume=resume, hooks=hooks)
    return run_trainer(GemmaTrainer, cfg, run_dir, control=control, resume=resume, hooks=hooks)


# --------------------------------------------------------------------------- the route


class GemmaTrainer(Trainer):
    """The gemma route: jitted steps on the mesh, orbax checkpoints."""

    route = "gemma"

    def setup(self) -> dict[str, Any]:
        import jax

        from adapters_lib import lora
        from adapters_lib import mesh as mesh_lib
        from adapters_lib.data import build_pipeline
        from adapters_lib.models.loader import load_model
        from adapters_lib.train.optimizer import make_optimizer, make_schedule
        from adapters_lib.train.step import build_steps

        cfg = self.cfg
        t = cfg.train
        t0 = time.perf_counter()
        devices = jax.devices()
        mesh = mesh_lib.make_mesh(cfg.mesh, devices)  # a bad device count fails here, in words
        loaded = load_model(cfg.model, param_dtype=t.param_dtype, sharding=mesh_lib.sharding_fn(mesh))
        mesh_lib.check(cfg.mesh, loaded.config, t.batch_size, cfg.data.max_length, len(devices),
                       grad_accum=t.grad_accum)
        rng = jax.random.key(t.seed)
        init_rng, rng = jax.random.split(rng)
        if cfg.lora.enabled:
            trainable = lora.init_lora(loaded.model, cfg.lora, loaded.params, init_rng)
            base_params = loaded.params
        else:
            trainable = loaded.params
            base_params = None
        optimizer = make_optimizer(t)
        steps = build_steps(loaded.model, cfg, optimizer, mesh, base_params, trainable)
        pipeline = build_pipeline(cfg.data, loaded.tokenizer, batch_size=t.batch_size, seed=t.seed)
        log.info("set-up %.1fs: %s", time.perf_counter() - t0,
                 mesh_lib.describe(cfg.mesh, len(devices)))
        return dict(loaded=loaded, mesh=mesh, rng=rng, trainable=trainable,
                    optimizer=optimizer, steps=steps, pipeline=pipeline, schedule=make_schedule(t))

    def train(self, resume: bool) -> TrainResult:
        import jax
        import numpy as np

        from adapters_lib.train.checkpoints import (
            CheckpointStore,
            NonFiniteState,
            rng_from_json,
            rng_to_json,
        )

        cfg, run, session = self.cfg, self.run, self.session
        t = cfg.train
        s = self.setup()
        steps, pipeline, loaded = s["steps"], s["pipeline"], s["loaded"]
        result = TrainResult(run_dir=run.path, state="running", step=0, total_steps=t.steps)
        state = steps.init_state(s["trainable"])
        del s["trainable"]
        if not cfg.lora.enabled:
            loaded.params = None  # the trainable tree is the model now (and is donated each step)
        rng = s["rng"]
        store = CheckpointStore(run.checkpoints_dir, keep=t.keep_checkpoints)
        start = step = 0
        log_ = _MetricLog(session, s["schedule"], result)

        def save(at: int, loss: float | None) -> None:
            # every loss up to ``at`` is known finite here: older checkpoints are confirmed
            session.sync()
            store.prune(confirmed_below=at, pinned=session.pinned)
            try:
                saved = store.save(at, state.params, state.opt_state,
                                   {"rng": rng_to_json(rng), "loss": loss, "time": time.time()})
            except NonFiniteState:
                raise diverged(cfg, "the trained values became NaN or infinite", at + 1) from None
            if saved:
                session.checkpointed(at)

        try:
            if resume:
                latest = session.resume_point()
                abstract = steps.abstract_state
                params, opt_state, meta = store.restore(latest, abstract.params, abstract.opt_state)
                state = state._replace(step=jax.device_put(np.int32(latest), steps.state_shardings.step),
                                       params=params, opt_state=opt_state)
                rng = rng_from_json(meta["rng"]) if "rng" in meta else rng
                start = step = latest
                session.resumed(start)
            session.progress(step=start, total_steps=t.steps)

            em = _ProbeModel(cfg, loaded)
            eval_data = [steps.put_batch(b) for b in pipeline.eval_batches(t.eval_batches)]

            def current_params() -> Any:
                return em.model_params(state.params)[1]

            def current_eval_loss() -> float | None:
                if not eval_data:
                    return None
                return _mean_eval(jax.device_get([steps.eval_step(state.params, b) for b in eval_data]))

            session.probe = ModelProbe(route=self.route, apply_fn=em.apply(), params=current_params,
                                       tokenizer=loaded.tokenizer,
                                       eval_examples=list(pipeline.eval_examples),
                                       eval_loss=current_eval_loss,
                                       trainable_params=_count(state.params))
            result.exact_match_base = run.status().get("exact_match_base")
            session.started(start)  # the eval hooks score the base model here (a fresh run)
            stopping = False
            while step < t.steps:
                batch = pipeline.train_batch(step)
                n_tokens = int(np.count_nonzero(batch["segment_ids"]))
                state, metrics = steps.train_step(state, steps.put_batch(batch))
                step += 1
                ev = None
                if eval_data and (step % t.eval_every == 0 or step == t.steps):
                    ev = [steps.eval_step(state.params, b) for b in eval_data]
                log_.add(step, metrics, n_tokens, ev)
                due_ckpt = step % t.checkpoint_every == 0 and step < t.steps
                if due_ckpt or ev is not None:
                    # a checkpoint's history must be known finite; an eval's hooks see this step
                    log_.flush(everything=True)
                    if due_ckpt or (step in session.requested and step < t.steps):
                        save(step, log_.last_loss)
                elif step % t.log_every == 0:
                    log_.flush(everything=False)  # all but the newest step: no wait on the device
                if session.should_stop():
                    stopping = True
                    break
                session.between_steps()
            log_.flush(everything=True)
            result.step = step

            if stopping:
                log_.finish()
                session.state("stopping", session.stop_reason, step=step)
                save(step, log_.last_loss)
                store.wait()
                return session.end_early(step, result)

            log_.final_extra.update(session.final_fields)  # e.g. the eval hook's exact-match
            log_.finish()
            save(step, result.final_loss)
            store.wait()
            store.prune(confirmed_below=None, pinned=session.pinned)  # done: every one is good
            result.state = "completed"
            session.settle("completed", f"{step} steps", step=step, final_loss=result.final_loss,
                           final_eval_loss=result.final_eval_loss)
            return result
        except TrainingDiverged as err:
            # checkpoint k holds the params after k updates, which gave the loss of step k+1:
            # every checkpoint from the step before the bad loss on is diverged.
            kept = store.discard_from(err.step - 1)
            result.state, result.step, result.message = "failed", err.step - 1, str(err)
            session.failed_divergence(err, kept)
            raise
        except KeyboardInterrupt:
            # Foreground Ctrl-C is a stop: keep what was done. The state may be mid-update (its
            # buffers donated); then the last periodic checkpoint is what remains.
            saved = None
            try:
                log_.flush(everything=True)
                log_.finish()
                if step > start:
                    save(step, log_.last_loss)
                    store.wait()
                    saved = step
            except (KeyboardInterrupt, TrainingDiverged, RuntimeError, ValueError) as e:
                log.warning("no checkpoint at the interrupt (%s)", e)
            at = saved if saved is not None else (store.latest_step() or start)
            session.settle("stopped", f"interrupted from the keyboard at step {at}; resume to continue",
                           step=at)
            result.state, result.step, result.message = "stopped", at, "interrupted"
            return result
        finally:
            store.close(quiet=sys.exc_info()[0] is not None)


class _MetricLog:
    """Per-step metrics held on device and written in groups (one host sync per group).

    The record of the last step is held back until ``finish()`` so that the end-of-run
    exact-match joins it.
    """

    def __init__(self, session: RunSession, schedule: Callable[[int], Any], result: TrainResult):
        self.session = session
        self.schedule = schedule
        self.result = result
        self.pending: list[tuple[int, Any, int, Any]] = []
        self.held: dict[str, Any] | None = None
        self.final_extra: dict[str, Any] = {}
        self.last_time = time.perf_counter()
        self.last_loss: float | None = None
        self.last_status = 0.0

    def add(self, step: int, metrics: Any, n_tokens: int, eval_out: Any) -> None:
        self.pending.append((step, metrics, n_tokens, eval_out))

    def flush(self, *, everything: bool) -> None:
        import jax

        todo = self.pending if everything else self.pending[:-1]
        if not todo:
            return
        self.pending = self.pending[len(todo):]
        fetched = jax.device_get([(m, e) for _, m, _, e in todo])
        now = time.perf_counter()
        per_step = (now - self.last_time) / len(todo)
        self.last_time = now
        t = self.session.cfg.train
        for (step, _, n_tokens, _), (m, ev) in zip(todo, fetched, strict=True):
            loss = float(m["loss"])
            if not finite(loss):
                raise diverged(self.session.cfg, f"loss became {loss}", step)
            self.last_loss = self.result.final_loss = self.result.losses[step] = loss
            record: dict[str, Any] = {
                "step": step,
                "loss": loss,
                "lr": float(self.schedule(step - 1)),
                "grad_norm": float(m["grad_norm"]),
                "tokens_per_s": round(n_tokens / per_step, 1) if per_step > 0 else None,
                "step_time_s": round(per_step, 5),
                "tokens": n_tokens,
            }
            if ev is not None:
                record["eval_loss"] = self.result.final_eval_loss = _mean_eval(ev)
                self.session.evaluated(step, {"eval_loss": record["eval_loss"]})
            if step == t.steps:
                self.held = record
            elif step % t.log_every == 0 or ev is not None or step == 1:
                self._write(record)  # step 1 always: the curve starts at the base model
        if now - self.last_status > 1.0:
            self.session.progress(step=todo[-1][0], total_steps=t.steps, loss=self.last_loss)
            self.last_status = now

    def finish(self) -> None:
        if self.held is not None:
            self.held.update(self.final_extra)
            self._write(self.held)
            self.held = None

    def _write(self, record: dict[str, Any]) -> None:
        self.session.metrics(record)
        _progress(self.session, record)


def _count(tree: Any) -> int:
    import jax
    import numpy as np

    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(tree)))


def _mean_eval(outs: list[dict[str, Any]]) -> float:
    """Token-weighted mean eval loss over the eval batches (``{"loss_sum", "n_tokens"}`` each)."""
    total = sum(float(o["loss_sum"]) for o in outs)
    count = sum(float(o["n_tokens"]) for o in outs)
    return total / max(count, 1.0)


def _progress(session: RunSession, record: dict[str, Any]) -> None:
    t = session.cfg.train
    text = (f"step {record['step']}/{t.steps} loss {record['loss']:.4f} lr {record['lr']:.2e} "
            f"grad_norm {record['grad_norm']:.3f} {record.get('tokens_per_s') or 0:.0f} tok/s")
    if "eval_loss" in record:
        text += f" eval_loss {record['eval_loss']:.4f}"
    log.info("%s", text)


class _ProbeModel:
    """The model the probe applies: LoRA merged into the base, one apply function for the run
    (one compiled decoder for every greedy answer the eval hooks ask for)."""

    def __init__(self, cfg: RunConfig, loaded: Any):
        self.cfg = cfg
        self.loaded = loaded
        self.apply_fn = None

    def model_params(self, trainable: Any) -> tuple[Any, Any]:
        """(the model to apply, its params) for the trainable tree (LoRA merged in)."""
        from adapters_lib import lora

        cfg, loaded = self.cfg, self.loaded
        if cfg.lora.enabled:
            return lora.wrap(loaded.model, cfg.lora), lora.merge_lora(loaded.params, trainable)
        return loaded.model, trainable

    def apply(self) -> Any:
        if self.apply_fn is None:
            from adapters_lib import evaluate, lora

            model = lora.wrap(self.loaded.model, self.cfg.lora) if self.cfg.lora.enabled else self.loaded.model
            self.apply_fn = evaluate.model_apply_fn(model)
        return self.apply_fn
