"""The training loop: a run directory in, a trained adapter (checkpoints, metrics) out.

``run_training(cfg, run_dir, control=None, resume=False, hooks=())`` runs a config on its
route through the one trainer loop (``train.trainer``: state, events, metrics, errors,
hooks — the caller's: the engine passes the evaluation area's, ``evals.hooks.default_hooks``):
``GemmaTrainer`` here, ``keras_route.train.KerasTrainer`` for ``backend = "keras"``. The gemma
route implements the trainer's route methods (setup, step, evaluate, save, restore):

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
5. hands the hooks the model as trained so far (``probe``) when it starts and at each
   eval step: the evaluation area's hooks score the task metrics into eval.jsonl —
   exact-match on the demo data before and after training — keep the best checkpoint (a
   checkpoint at an eval step a hook asks for) and stop early.

The loss is the run's objective's (``train.objectives``, ``train.objective``); its metrics
(DPO's reward margin and accuracy, …) join each record, and the eval split's the eval ones.

``control`` (the engine's TrainControl) is polled between steps: ``should_stop()`` ends the
run as ``stopped`` after a checkpoint; ``between_steps()`` lets the engine serve sampling;
``on_metrics(record)`` / ``on_event(record)`` receive what is written to the run dir. Hooks
see the same records (``TrainHook.on_step``/``on_eval``/``on_checkpoint``/``should_stop``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.config import RunConfig
from adapters_lib.runs import RunDir
from adapters_lib.train import reaper
from adapters_lib.train.hooks import TrainHook
from adapters_lib.train.probe_model import ProbeModel
from adapters_lib.train.session import (
    ModelProbe,
    TrainResult,
    diverged,
)
from adapters_lib.train.trainer import HookSource, RouteSetup, Trainer, run_trainer

__all__ = ["GemmaTrainer", "run_training"]

log = logging.getLogger(__name__)


def run_training(cfg: RunConfig, run_dir: str | Path | RunDir, *, control: Any = None,
                 resume: bool = False, hooks: HookSource | Iterable[TrainHook] = ()) -> TrainResult:
    """Train ``cfg`` in ``run_dir`` (made by ``runs.create_run``) on its route, with the
    caller's ``hooks``. See the module docstring and ``train.trainer.run_trainer``.

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


@dataclass
class GemmaSetup:
    """What the gemma route's set-up made (``GemmaTrainer.setup``)."""

    loaded: Any
    """The base model (``models.loader.Loaded``: model, params, tokenizer, config)."""
    mesh: Any
    rng: Any
    steps: Any
    """The jitted steps (``train.compiled_steps.Steps``, built by ``train.step.build_steps``)."""
    pipeline: Any
    eval_data: list
    """The eval batches, placed on the mesh once."""


def _hold_warm_ups() -> Any:
    """Hold every compile job (the Compare's, an earlier run's, this run's own: ``ALL``) while
    this run sets up, until its first step's program is lowered (a cold start: XLA's compile,
    which releases the GIL, follows) or, when that program is ready, until step 1's metrics are
    in (``GemmaTrainer.before_start``): their tracing takes the GIL the set-up, that trace and
    the first step need (``CompileQueue.hold``)."""
    from adapters_lib.train.compile_queue import ALL
    from adapters_lib.train.step_programs import _behind

    return _behind().hold(ALL, "a run sets up")


class GemmaTrainer(Trainer):
    """The gemma route: jitted steps on the mesh, orbax checkpoints."""

    route = "gemma"

    def setup(self) -> RouteSetup:
        self._release_held = _hold_warm_ups()  # until the first step's program is lowered
        try:
            return self._setup()
        except BaseException:
            self._release_warm_ups()
            raise

    def _setup(self) -> RouteSetup:
        from adapters_lib.train.checkpoints import CheckpointStore
        from adapters_lib.train.optimizer import make_schedule
        from adapters_lib.train.plan import Timeline, plan_run

        cfg = self.cfg
        t = cfg.train
        plan = plan_run(cfg)
        loaded, steps, pipeline, trainable = plan.loaded, plan.steps, plan.pipeline, plan.trainable
        self.own = plan.own
        clock = Timeline()
        self.state = steps.init_state(trainable)
        plan.trainable = None
        del trainable
        if not cfg.lora.enabled:
            loaded.params = None  # the trainable tree is the model now (and is donated each step)
        clock.mark("state")
        self.store = CheckpointStore(self.run.checkpoints_dir, keep=t.keep_checkpoints)
        eval_host = plan.eval_host
        self.s = GemmaSetup(loaded=loaded, mesh=plan.mesh, rng=plan.rng, steps=steps, pipeline=pipeline,
                            eval_data=[steps.put_batch(b) for b in eval_host])
        steps.compile_eval_behind(self.s.eval_data)  # an accelerator: ready by the first eval
        self.eval_digest = _eval_digest(eval_host)
        from adapters_lib.train.metric_log import MetricLog

        self.log_ = MetricLog(self)
        self.em = ProbeModel(cfg, loaded, plan.family)
        self.takeover = None
        own = plan.own_steps is not None  # the family's program serves until the run's own is compiled
        for program, args in plan.behind[int(own):]:  # the next tweak's
            program.compile_behind(*args)
        if own:
            from adapters_lib.train.own_program import Takeover

            self.takeover = Takeover(plan, steps, self.s.eval_data, t.steps)
        clock.mark("eval batches")
        plan.timeline.update(clock.phases)
        log.info("set-up %.1f s (%s): %s", sum(plan.timeline.values()), plan.describe_timeline(),
                 mesh_describe(cfg, plan.mesh))
        self.log_.watch_compiles(steps)  # last: ``close`` stops it
        return RouteSetup(schedule=make_schedule(t), has_eval=bool(self.s.eval_data))

    def restore(self, step: int) -> None:
        import jax
        import numpy as np

        from adapters_lib.train.checkpoints import rng_from_json

        steps = self.s.steps
        abstract = steps.abstract_state
        if self.own is None:
            params, opt_state, meta = self.store.restore(step, abstract.params, abstract.opt_state)
        else:  # the checkpoint holds the run's own rank and targets: padded into the family's shapes
            from adapters_lib.lora.family import fit

            params, opt_state, meta = self.store.restore(step, self.own.params, self.own.opt_state)
            params = jax.device_put(fit(params, abstract.params), steps.trainable_shardings)
            opt_state = jax.device_put(fit(opt_state, abstract.opt_state), steps.state_shardings.opt_state)
        self.state = self.state._replace(step=jax.device_put(np.int32(step), steps.state_shardings.step),
                                         params=params, opt_state=opt_state)
        self.s.rng = rng_from_json(meta["rng"]) if "rng" in meta else self.s.rng

    def before_start(self, start: int) -> None:
        """A cold start on an accelerator: the first train step's program compiles now, in the
        foreground, while the eval step's compiles behind (queued at set-up); the base model's
        eval then finds its program ready. It used to wait for it first (24 s of the 270M's cold
        start on the v5e), and the train step's compile (~90 s) came after."""
        from adapters_lib.train.plan import first_args

        steps = self.s.steps
        warm = False  # the first step's program is ready: the hold lasts until step 1's metrics
        try:
            if not steps.compile_behind:
                return  # a CPU compiles one program at a time either way
            batch = self.s.pipeline.train_batch(start)
            # the compiles wait until it is lowered: their tracing would take the GIL its
            # tracing needs (the 1B's cold start on the v5e: 12 s more with three tracers).
            # Ready or compiling behind: warm. A cold family run compiles here too (waiting for
            # step 1 cost the 270M's cold launch 79 → 110 s, its first Compare 0.4 → 22.9 s)
            warm = not steps._train.compile_now(*first_args(steps, batch), lowered=self._release_warm_ups)
        finally:
            if not warm:
                self._release_warm_ups()
            self._hold_until = start + 3  # at the latest when step start+3 is dispatched
            from adapters_lib import program_store

            self._writes_after = program_store.steps_running()  # no GIL-holding store write mid-run

    def _first_step_in(self, step: int) -> None:
        """The compiles held for a warm start go on once step 1's metrics are in (or a few steps
        on, when records are fetched less often)."""
        if getattr(self, "_release_held", None) is not None and (
                self.result.losses or step >= getattr(self, "_hold_until", 0)):
            self._release_warm_ups()

    def probe(self) -> ModelProbe:
        s = self.s
        return ModelProbe(route=self.route, apply_fn=self.em.apply(),
                          params=lambda: self.em.model_params(self.state.params)[1],
                          tokenizer=s.loaded.tokenizer, eval_examples=list(s.pipeline.eval_examples),
                          eval_loss=lambda: self.evaluate().get("eval_loss"),
                          trainable_params=_count(self.state.params if self.own is None else self.own.params),
                          base_fingerprint=self.base_fingerprint)

    def base_fingerprint(self) -> dict[str, Any] | None:
        """What this route's score of the base model depends on (``evals.base_scores``): not
        the adapters (zero at step 0), the lr, the steps or the seed (the eval batches are)."""
        import jax

        from adapters_lib.models.loader import fingerprint
        from adapters_lib.train.step_programs import mesh_signature

        cfg, t = self.cfg, self.cfg.train
        if jax.process_count() > 1 or getattr(t, "reference", "base") not in ("", "base"):
            return None  # every process scores together; another run's adapters may change
        files = fingerprint(cfg.model)
        if files is None:
            return None
        return {"route": self.route, "model": repr(cfg.model), "files": files,
                "param_dtype": t.param_dtype, "compute_dtype": t.compute_dtype,
                "mesh": mesh_signature(self.s.mesh), "objective": getattr(t, "objective", "sft"),
                "beta": getattr(t, "beta", None), "label_smoothing": getattr(t, "label_smoothing", None),
                "sft_weight": getattr(t, "sft_weight", None),
                "eval_batches": self.eval_digest}

    def step(self, start: int, stop: int) -> dict[str, Any] | None:
        """Steps start+1..stop. The host does not wait for the device between steps: the
        metrics are fetched in groups, one step behind (``metric_log.MetricLog``)."""
        import numpy as np

        s, t = self.s, self.cfg.train
        for step in range(start + 1, stop + 1):
            if self.takeover is not None:
                self._take_over(step)
            batch = s.pipeline.train_batch(step - 1)
            n_tokens = sum(int(np.count_nonzero(v)) for k, v in batch.items() if k.endswith("segment_ids"))
            donated, placed = self.state, s.steps.put_batch(batch)
            self.state, metrics = s.steps.train_step(donated, placed)
            reaper.drop((donated, placed))  # their arrays (the 1B family's ~1,100) die off this thread
            del donated, placed
            self.reached = step
            self.log_.add(step, metrics, n_tokens)
            if step == stop:
                break
            if step % t.log_every == 0:
                self.log_.flush(everything=False)  # all but the newest step: no wait on the device
            self._first_step_in(step)
            if self.poll():
                self.log_.flush(everything=True)
                return None
        record = self.log_.flush(everything=True, hold=stop)
        self._first_step_in(stop)
        return record

    def _take_over(self, step: int) -> None:
        """The run's own (exact) program takes over from the family's once compiled."""
        state = self.takeover.poll(step, self.state)
        if state is None:
            if self.takeover.failed:
                self.takeover = None
            return
        self.state, self.s.steps = state, self.takeover.plan.own_steps
        self.own, self.takeover = None, None
        self.em = ProbeModel(self.cfg, self.s.loaded, None)
        log.info("LoRA: the run's own program took over at step %d (the family's served until it compiled)",
                 self.reached)

    def evaluate(self) -> dict[str, float]:
        import jax

        s = self.s
        if not s.eval_data:
            return {}
        outs = jax.device_get([s.steps.eval_step(self.state.params, b) for b in s.eval_data])
        return _mean_eval(outs, s.steps.objective.metrics)

    def save(self, step: int) -> bool:
        from adapters_lib.train.checkpoints import NonFiniteState, rng_to_json

        # every loss up to ``step`` is known finite here: older checkpoints are confirmed
        self.store.prune(confirmed_below=step, pinned=self.session.pinned)
        try:
            params, opt_state = self.state.params, self.state.opt_state
            if self.own is not None:  # the run's own rank and targets, never the family's padding
                import jax

                from adapters_lib.lora.family import fit

                host = jax.process_count() == 1  # numpy: no slice op compiled a leaf on the chip
                params, opt_state = fit((params, opt_state), (self.own.params, self.own.opt_state), host=host)
            saved = bool(self.store.save(step, params, opt_state,
                                         {"rng": rng_to_json(self.s.rng), "loss": self.result.losses.get(step),
                                          "time": time.time()}))
            if saved and step == self.cfg.train.steps and self.cfg.lora.enabled:
                self._final = (step, params)  # the Compare after the run takes it (``finish``)
            return saved
        except NonFiniteState:
            raise diverged(self.cfg, "the trained values became NaN or infinite", step + 1) from None

    def finish(self, done: bool) -> None:
        self._release_writes()
        self.store.wait()
        if done:
            self.store.prune(confirmed_below=None, pinned=self.session.pinned)  # every one is good
            final = getattr(self, "_final", None)
            if final is not None:  # written: kept for the Compare's warm-up (no read back)
                from adapters_lib.train.checkpoints import remember_saved

                remember_saved(self.run.checkpoints_dir, *final)

    def discard_from(self, step: int) -> list[int]:
        return self.store.discard_from(step)

    def latest_checkpoint(self) -> int | None:
        return self.store.latest_step()

    def flush(self) -> None:
        self.log_.flush(everything=True)

    def _release_writes(self) -> None:
        release, self._writes_after = getattr(self, "_writes_after", None), None
        if release is not None:
            release()

    def _release_warm_ups(self) -> None:
        release, self._release_held = getattr(self, "_release_held", None), None
        if release is not None:
            release()

    def close(self, quiet: bool) -> None:
        if getattr(self, "takeover", None) is not None:
            self.takeover.drop()
        self._release_warm_ups()
        self._release_writes()
        store = getattr(self, "store", None)
        if store is not None:
            store.close(quiet=quiet)
        if getattr(self, "log_", None) is not None and self.log_.watch is not None:
            self.log_.watch.close()


def mesh_describe(cfg: RunConfig, mesh: Any) -> str:
    from adapters_lib import mesh as mesh_lib

    return mesh_lib.describe(cfg.mesh, mesh.devices.size)


def _eval_digest(batches: list[Any]) -> str:
    """sha256 over the host eval batches: names, dtypes, shapes and bytes."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            a = np.ascontiguousarray(np.asarray(batch[name]))
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _count(tree: Any) -> int:
    import jax
    import numpy as np

    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(tree)))


def _mean_eval(outs: list[dict[str, Any]], metrics: tuple[str, ...] = ()) -> dict[str, float]:
    """The eval split's loss (and the objective's metrics) over its batches: Σ sums / Σ weight
    (``{"loss_sum", "weight", …}`` each; the weight is the loss tokens for SFT)."""
    count = max(sum(float(o["weight"]) for o in outs), 1.0)
    out = {"eval_loss": sum(float(o["loss_sum"]) for o in outs) / count}
    for k in metrics:
        out[f"eval_{k}"] = sum(float(o[k]) for o in outs) / count
    return out
