"""The training loop: a run directory in, a trained adapter (checkpoints, metrics) out.

``run_training(cfg, run_dir, control=None, resume=False)``:

1. loads the base model on the mesh, makes the trainable tree (fresh LoRA adapters, or every
   param for a full fine-tune), the optimizer and the jitted steps (``train.step``);
2. on ``resume`` restores the newest checkpoint (params, optimizer state, RNG; the data
   position is the step) and drops metric lines past it;
3. for each step feeds ``pipeline.train_batch(step)``. The host does not wait for the device
   between steps: per-step metrics stay on device and are fetched together every
   ``log_every`` steps, one step behind (``jax.device_get`` of a small dict). A non-finite
   loss stops the run (``failed``) and deletes checkpoints made from the diverged params;
4. writes ``metrics.jsonl`` (step numbers count updates: step k is the k-th update),
   ``events.jsonl`` and ``status.json`` (see ``adapters_lib.runs``) and checkpoints every
   ``checkpoint_every`` steps, on stop and at the end;
5. on the demo data (or when ``train.eval_exact_match`` > 0) measures exact-match on the eval
   split before (the base model) and after training.

``control`` (the engine's TrainControl) is polled between steps: ``should_stop()`` ends the
run as ``stopped`` after a checkpoint; ``between_steps()`` lets the engine serve sampling;
``on_metrics(record)`` / ``on_event(record)`` receive what is written to the run dir.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapters_lib.config import RunConfig
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import RunDir

log = logging.getLogger(__name__)


class TrainControl(Protocol):
    def should_stop(self) -> bool: ...
    def on_metrics(self, record: dict[str, Any]) -> None: ...
    def on_event(self, record: dict[str, Any]) -> None: ...
    def between_steps(self) -> None: ...


class NullControl:
    """No engine: never stops, drops callbacks."""

    def should_stop(self) -> bool:
        return False

    def on_metrics(self, record: dict[str, Any]) -> None:
        pass

    def on_event(self, record: dict[str, Any]) -> None:
        pass

    def between_steps(self) -> None:
        pass


class TrainingDiverged(WorkbenchError):
    """The loss became NaN or infinite; the run is ``failed``, its last good checkpoint kept."""

    def __init__(self, message: str, *, step: int, where: str | None = None, hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.step = step


@dataclass
class TrainResult:
    run_dir: Path
    state: str
    """completed, stopped or failed."""
    step: int
    total_steps: int
    final_loss: float | None = None
    final_eval_loss: float | None = None
    exact_match_base: float | None = None
    exact_match_tuned: float | None = None
    losses: dict[int, float] = field(default_factory=dict)
    message: str = ""


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _exact_match_count(cfg: RunConfig, available: int) -> int:
    n = cfg.train.eval_exact_match
    if n < 0:  # auto: on the demo tasks (their answers are short and checkable)
        return available if cfg.data.path == "demo" else 0
    return min(n, available)


class _Run:
    """The pieces of one training run, made once by ``_setup``."""

    def __init__(self, cfg: RunConfig, run: RunDir, control: Any):
        self.cfg = cfg
        self.run = run
        self.control = control

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = self.run.append_event(kind, **fields)
        self.control.on_event(record)
        return record

    def state(self, state: str, message: str = "", **fields: Any) -> None:
        status = self.run.write_status(state, **fields, **({"message": message} if message else {}))
        self.event("state", state=state, step=status.get("step", 0), **({"message": message} if message else {}))


def run_training(cfg: RunConfig, run_dir: str | Path | RunDir, *, control: Any = None,
                 resume: bool = False) -> TrainResult:
    """Train ``cfg`` in ``run_dir`` (made by ``runs.create_run``). See the module docstring.

    Raises ``WorkbenchError`` for a mistake in the config or data (the run is marked
    ``failed`` with the same one-line cause), ``TrainingDiverged`` for a NaN/inf loss.
    A ``KeyboardInterrupt`` is taken as a stop: checkpoint, ``stopped``, and the result.
    """
    if cfg.model.backend == "keras":
        from adapters_lib.keras_route import run_keras_training

        return run_keras_training(cfg, run_dir, control=control, resume=resume)
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    r = _Run(cfg, run, control or NullControl())
    r.state("running", step=run.status().get("step", 0), total_steps=cfg.train.steps,
            message="resuming" if resume else "starting")
    try:
        return _train(r, resume=resume)
    except WorkbenchError as err:
        if run.state not in ("failed",):
            r.state("failed", str(err), error=err.to_dict())
        raise
    except BaseException as err:  # a bug, an OOM: record it, keep the traceback for the log
        if isinstance(err, KeyboardInterrupt):
            if run.state not in ("stopped", "failed", "completed"):
                r.state("stopped", "interrupted from the keyboard before the first step")
            raise
        r.state("failed", f"{type(err).__name__}: {err}",
                error={"message": f"{type(err).__name__}: {err}", "where": None, "hint": None})
        raise


# --------------------------------------------------------------------------- setup


def _setup(r: _Run, resume: bool) -> dict[str, Any]:
    import jax

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.data import build_pipeline
    from adapters_lib.models.loader import load_model
    from adapters_lib.train.optimizer import make_optimizer, make_schedule
    from adapters_lib.train.step import build_steps

    cfg = r.cfg
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


# --------------------------------------------------------------------------- the loop


def _train(r: _Run, *, resume: bool) -> TrainResult:
    import jax
    import numpy as np

    from adapters_lib.train.checkpoints import CheckpointStore, rng_from_json, rng_to_json

    cfg, run, control = r.cfg, r.run, r.control
    t = cfg.train
    s = _setup(r, resume)
    steps, pipeline, loaded = s["steps"], s["pipeline"], s["loaded"]
    result = TrainResult(run_dir=run.path, state="running", step=0, total_steps=t.steps)
    state = steps.init_state(s["trainable"])
    del s["trainable"]
    if not cfg.lora.enabled:
        loaded.params = None  # the trainable tree is the model now (and is donated each step)
    rng = s["rng"]
    store = CheckpointStore(run.checkpoints_dir, keep=t.keep_checkpoints)
    start = step = 0
    log_ = _MetricLog(r, s["schedule"], result)

    def save(at: int, loss: float | None) -> None:
        store.save(at, state.params, state.opt_state,
                   {"rng": rng_to_json(rng), "loss": loss, "time": time.time()})
        r.event("checkpoint", step=at)

    try:
        if resume:
            latest = store.latest_step()
            if latest is None:
                raise WorkbenchError(f"run {run.run_id} has no checkpoint to resume from",
                                     where=str(run.checkpoints_dir),
                                     hint="start a new run with `gemma-workbench train`")
            abstract = steps.abstract_state
            params, opt_state, meta = store.restore(latest, abstract.params, abstract.opt_state)
            state = state._replace(step=jax.device_put(np.int32(latest), steps.state_shardings.step),
                                   params=params, opt_state=opt_state)
            rng = rng_from_json(meta["rng"]) if "rng" in meta else rng
            start = step = latest
            run.truncate_metrics_after(start)
            r.event("resumed", step=start)
            log.info("resumed %s at step %d", run.run_id, start)
        run.write_status("running", step=start, total_steps=t.steps)

        em_n = _exact_match_count(cfg, len(pipeline.eval_examples))
        em = _ExactMatch(cfg, loaded, list(pipeline.eval_examples)[:em_n])
        result.exact_match_base = run.status().get("exact_match_base")
        if em.examples and result.exact_match_base is None:
            base = em.measure(state.params, base=True)
            result.exact_match_base = base.score
            run.write_status("running", exact_match_base=base.score)
            r.event("exact_match", phase="base", step=start, **base.to_dict())

        eval_data = [steps.put_batch(b) for b in pipeline.eval_batches(t.eval_batches)]
        stop_reason = ""
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
            if due_ckpt:
                log_.flush(everything=True)  # a checkpoint's history must be known finite
                save(step, log_.last_loss)
            elif step % t.log_every == 0:
                log_.flush(everything=False)  # all but the newest step: no wait on the device
            if control.should_stop():
                stop_reason = "stopped on request"
                break
            control.between_steps()
        log_.flush(everything=True)
        result.step = step

        if stop_reason:
            log_.finish()
            r.state("stopping", stop_reason, step=step)
            save(step, log_.last_loss)
            store.wait()
            r.state("stopped", f"{stop_reason} at step {step}; resume to continue", step=step)
            result.state, result.message = "stopped", stop_reason
            return result

        if em.examples:
            tuned = em.measure(state.params, base=False)
            result.exact_match_tuned = tuned.score
            r.event("exact_match", phase="tuned", step=step, **tuned.to_dict())
            log_.final_extra.update(eval_exact_match=tuned.score, base_exact_match=result.exact_match_base)
            run.write_status("running", exact_match_tuned=tuned.score)
        log_.finish()
        save(step, result.final_loss)
        store.wait()
        result.state = "completed"
        r.state("completed", f"{step} steps", step=step, final_loss=result.final_loss,
                final_eval_loss=result.final_eval_loss)
        return result
    except TrainingDiverged as err:
        store.wait()
        # checkpoint k holds the params after k updates, which gave the loss of step k+1:
        # every checkpoint from the step before the bad loss on is diverged.
        for k in store.steps():
            if k >= err.step - 1:
                store.manager.delete(k)
        kept = store.steps()
        result.state, result.step, result.message = "failed", err.step - 1, str(err)
        r.state("failed", str(err), step=max(err.step - 1, 0),
                last_good_checkpoint=kept[-1] if kept else None, error=err.to_dict())
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
        r.state("stopped", f"interrupted from the keyboard at step {at}; resume to continue", step=at)
        result.state, result.step, result.message = "stopped", at, "interrupted"
        return result
    finally:
        store.close()


class _MetricLog:
    """Per-step metrics held on device and written in groups (one host sync per group).

    The record of the last step is held back until ``finish()`` so that the end-of-run
    exact-match joins it.
    """

    def __init__(self, r: _Run, schedule: Callable[[int], Any], result: TrainResult):
        self.r = r
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
        t = self.r.cfg.train
        for (step, _, n_tokens, _), (m, ev) in zip(todo, fetched, strict=True):
            loss = float(m["loss"])
            if not _finite(loss):
                raise TrainingDiverged(
                    f"loss became {loss} at step {step}", step=step,
                    where="[train] learning_rate",
                    hint=f"lower train.learning_rate (now {t.learning_rate:g}), e.g. to "
                         f"{t.learning_rate / 10:g}, or keep train.clip_norm on (now {t.clip_norm:g}); "
                         "the last good checkpoint is kept",
                )
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
            if step == t.steps:
                self.held = record
            elif step % t.log_every == 0 or ev is not None or step == 1:
                self._write(record)  # step 1 always: the curve starts at the base model
        if now - self.last_status > 1.0:
            self.r.run.write_status("running", step=todo[-1][0], total_steps=t.steps,
                                    loss=self.last_loss)
            self.last_status = now

    def finish(self) -> None:
        if self.held is not None:
            self.held.update(self.final_extra)
            self._write(self.held)
            self.held = None

    def _write(self, record: dict[str, Any]) -> None:
        self.r.run.append_metrics(record)
        self.r.control.on_metrics(record)
        _progress(self.r, record)


def _mean_eval(outs: list[dict[str, Any]]) -> float:
    """Token-weighted mean eval loss over the eval batches (``{"loss_sum", "n_tokens"}`` each)."""
    total = sum(float(o["loss_sum"]) for o in outs)
    count = sum(float(o["n_tokens"]) for o in outs)
    return total / max(count, 1.0)


def _progress(r: _Run, record: dict[str, Any]) -> None:
    t = r.cfg.train
    text = (f"step {record['step']}/{t.steps} loss {record['loss']:.4f} lr {record['lr']:.2e} "
            f"grad_norm {record['grad_norm']:.3f} {record.get('tokens_per_s') or 0:.0f} tok/s")
    if "eval_loss" in record:
        text += f" eval_loss {record['eval_loss']:.4f}"
    log.info("%s", text)


class _ExactMatch:
    """Exact-match on the eval examples with one compiled decoder for base and tuned."""

    def __init__(self, cfg: RunConfig, loaded: Any, examples: list[dict[str, Any]]):
        self.cfg = cfg
        self.loaded = loaded
        self.examples = examples
        self.apply_fn = None

    def measure(self, trainable: Any, *, base: bool) -> Any:
        import jax

        from adapters_lib import evaluate, lora

        t0 = time.perf_counter()
        cfg, loaded = self.cfg, self.loaded
        if cfg.lora.enabled:
            model = lora.wrap(loaded.model, cfg.lora)
            params = lora.merge_lora(loaded.params, trainable)
        else:
            model = loaded.model
            params = trainable
        if self.apply_fn is None:
            self.apply_fn = evaluate.model_apply_fn(model)
        out = evaluate.exact_match(model, params, loaded.tokenizer, self.examples,
                                   max_length=max(self.cfg.data.max_length, 64), apply_fn=self.apply_fn)
        jax.block_until_ready(params)
        log.info("exact-match (%s) %.3f (%d/%d) in %.1fs", "base" if base else "tuned", out.score,
                 out.correct, out.total, time.perf_counter() - t0)
        for prompt, ref, pred in out.samples[:3]:
            log.info("  %r → %r (ref %r)", prompt, pred, ref)
        return out
