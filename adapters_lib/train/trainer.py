"""The trainer: one run lifecycle, and the route methods each training route implements.

``Trainer.train(resume)`` owns the loop for every route (after tunix's ``PeftTrainer``):
set up, restore on a resume, hand the hooks the model (``on_start``), then train in segments
that end at eval, checkpoint and final steps; at each segment's end evaluate, write the
step's metrics record (with the fields the hooks return), checkpoint when due or asked for,
and ask once whether to stop; at the end checkpoint and settle (``completed``; ``stopped`` on
request, resumable; ``completed`` when a hook ended the run early). A NaN/inf loss fails the
run and discards the checkpoints made from the diverged params; a Ctrl-C is a stop that keeps
what was done. A route (``train.loop.GemmaTrainer``, ``keras_route.train.KerasTrainer``)
implements only the route methods:

- ``setup() -> RouteSetup`` (a typed record: the schedule the records show, whether there
  is an eval split; the route keeps its own typed set-up record beside it);
- ``restore(step)``, ``probe() -> ModelProbe``;
- ``step(start, stop) -> record | None``: train steps start+1..stop, recording each through
  ``step_record`` and calling ``poll()`` after each step before ``stop``; the record of
  ``stop`` comes back unwritten (None when ``poll`` stopped the segment);
- ``evaluate() -> {"eval_loss": …, …}`` (the eval split's metrics; {} without one);
- ``save(step) -> bool`` (a checkpoint; older ones are confirmed), ``finish(done)`` (wait for
  the writer; on ``done`` prune to ``keep_checkpoints``), ``discard_from(step) -> kept``,
  ``flush()`` (records held back), ``close(quiet)``.

The objective (``train.objectives``) is the step's; the loop only writes the metrics its step
returns. ``run_trainer`` is the harness around a route: it claims the run's owner lease,
writes ``running``, runs the route, and records a failure in **one** place
(``runs.lifecycle.record_failure``) whatever the error. The hooks come from the caller
(``hooks``: hook objects, or a function of the config that makes them, called inside the
harness so its mistakes are recorded like any other); the evaluation area's are
``evals.hooks.default_hooks``. The session and its records are in ``train.session``.
Importing this module is cheap.
"""

from __future__ import annotations

import abc
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import ACTIVE_STATES, RunDir, lease, lifecycle
from adapters_lib.train.hooks import TrainHook
from adapters_lib.train.session import (
    ModelProbe,
    RunSession,
    TrainingDiverged,
    TrainResult,
    diverged,
    finite,
)

log = logging.getLogger(__name__)


@dataclass
class RouteSetup:
    """What a route's ``setup()`` gives the loop."""

    schedule: Callable[[int], Any]
    """The learning rate of update ``i`` (0-based), for the ``lr`` the records show."""
    has_eval: bool
    """Whether the run has an eval split (eval steps end segments)."""


class Trainer(abc.ABC):
    """A training route over one ``RunSession``; ``train`` is the loop (see the module)."""

    route: ClassVar[str] = ""
    saves_on_interrupt: ClassVar[bool] = True
    """A Ctrl-C between steps leaves a state the route can checkpoint (else the last periodic
    checkpoint is what remains, and the interrupt goes on up)."""

    def __init__(self, session: RunSession):
        self.session = session
        self.cfg = session.cfg
        self.run = session.run
        self.reached = 0
        """The last update done (routes keep it current inside ``step``)."""
        self.stopping = False
        self.result = TrainResult(run_dir=self.run.path, state="running", step=0,
                                  total_steps=self.cfg.train.steps)
        self.route_setup: RouteSetup | None = None
        self._last_status = 0.0
        self.ending: dict[str, float] = {}
        """The completed run's end, seconds per phase (metrics, checkpoint, written, state;
        ``run_trainer`` adds the hooks' and logs the line): what a user waits for after the
        last step."""

    # ---------------------------------------------------------------- route methods
    @abc.abstractmethod
    def setup(self) -> RouteSetup: ...

    @abc.abstractmethod
    def restore(self, step: int) -> None: ...

    def before_start(self, start: int) -> None:
        """Before the hooks' start (the base model's eval) and the first step: a route may
        compile the first step's program here, while its eval's compiles behind."""
        return None

    @abc.abstractmethod
    def probe(self) -> ModelProbe: ...

    @abc.abstractmethod
    def step(self, start: int, stop: int) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    def evaluate(self) -> dict[str, float]: ...

    @abc.abstractmethod
    def save(self, step: int) -> bool: ...

    @abc.abstractmethod
    def finish(self, done: bool) -> None: ...

    @abc.abstractmethod
    def discard_from(self, step: int) -> list[int]: ...

    def flush(self) -> None:
        """Write the records the route holds back (the gemma route fetches metrics in groups)."""
        return None

    def close(self, quiet: bool) -> None:
        """Release what the route holds (its checkpoint writer)."""
        return None

    # ---------------------------------------------------------------- for the routes
    def poll(self) -> bool:
        """Once a step: the stop decision, then the engine's jobs between steps."""
        if self.session.should_stop():
            self.stopping = True
            return True
        self.session.between_steps()
        return False

    def step_record(self, step: int, *, loss: float, grad_norm: float | None, n_tokens: int,
                    seconds: float, extra: dict[str, Any] | None = None,
                    hold: bool = False) -> dict[str, Any] | None:
        """Step ``step``'s metrics record: checked finite, written every ``log_every`` steps
        (and step 1: the curve starts at the base model), or held back (``hold``: the record of
        a segment's last step, which the loop completes and writes)."""
        if not finite(loss):
            raise diverged(self.cfg, f"loss became {loss}", step)
        t = self.cfg.train
        self.result.final_loss = self.result.losses[step] = loss
        record: dict[str, Any] = {
            "step": step, "loss": loss, "lr": float(self.route_setup.schedule(step - 1)),
            "grad_norm": grad_norm, "tokens_per_s": round(n_tokens / seconds, 1) if seconds > 0 else None,
            "step_time_s": round(seconds, 5), "tokens": n_tokens, **(extra or {})}
        now = time.perf_counter()
        if now - self._last_status > 1.0:
            self.session.progress(step=step, total_steps=t.steps, loss=loss)
            self._last_status = now
        if hold:
            return record
        if step % t.log_every == 0 or step == 1:
            self._write(record)
        return None

    def checkpoint(self, step: int) -> None:
        """A checkpoint of ``step``: the metrics so far made durable first."""
        self.session.sync()
        if self.save(step):
            self.session.checkpointed(step)

    # ---------------------------------------------------------------- the loop
    def train(self, resume: bool) -> TrainResult:
        t, session, result = self.cfg.train, self.session, self.result
        self.route_setup = self.setup()
        session.set_up()
        start = 0
        try:
            if resume:
                start = session.resume_point()
                self.restore(start)
                session.resumed(start)
            self.reached = step = start
            session.progress(step=start, total_steps=t.steps)
            self.before_start(start)
            session.probe = self.probe()
            result.exact_match_base = session.started(start).get("base_exact_match")
            final: dict[str, Any] = {}
            while step < t.steps and not self.stopping:
                record = self.step(step, self._boundary(step))
                step = self.reached
                if record is None:  # stopped inside the segment; its records are written
                    break
                due_eval = self.route_setup.has_eval and (step % t.eval_every == 0 or step == t.steps)
                ev = self.evaluate() if due_eval else {}
                if ev:
                    record.update(ev)
                    result.final_eval_loss = ev.get("eval_loss", result.final_eval_loss)
                    record.update(session.evaluated(step, dict(ev)))  # the hooks' fields join it
                if ev or step == t.steps or step % t.log_every == 0 or step == 1:
                    self._write(record)
                if step == t.steps:
                    final = record
                wanted = step % t.checkpoint_every == 0 or step in session.requested
                if wanted and step < t.steps:
                    self.checkpoint(step)
                if step < t.steps:
                    self.poll()
            end = self.ending
            end.clear()
            t0 = time.perf_counter()
            self.flush()
            end["metrics"] = time.perf_counter() - t0
            result.step = step
            if self.stopping and step < t.steps:
                session.state("stopping", session.stop_reason, step=step)
                self.checkpoint(step)
                self.finish(done=False)
                end.clear()  # the end of a completed run only
                return session.end_early(step, result)
            t0 = time.perf_counter()
            self.checkpoint(step)
            end["checkpoint"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            self.finish(done=True)
            end["written"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            result.exact_match_tuned = final.get("eval_exact_match")
            if result.exact_match_base is None:
                result.exact_match_base = final.get("base_exact_match")
            result.state = "completed"
            session.settle("completed", f"{step} steps", step=step, final_loss=result.final_loss,
                           final_eval_loss=result.final_eval_loss)
            end["state"] = time.perf_counter() - t0
            return result
        except TrainingDiverged as err:
            # checkpoint k holds the params after k updates, which gave the loss of step k+1:
            # every checkpoint from the step before the bad loss on is diverged.
            kept = self.discard_from(err.step - 1)
            result.state, result.step, result.message = "failed", err.step - 1, str(err)
            session.failed_divergence(err, kept)
            raise
        except KeyboardInterrupt:
            if not self.saves_on_interrupt:
                raise
            return self._interrupted(start)
        finally:
            self.close(quiet=sys.exc_info()[0] is not None)

    def _boundary(self, step: int) -> int:
        """The end of the segment after ``step``: the next eval, checkpoint or final step."""
        t = self.cfg.train
        bounds = [t.steps, (step // t.checkpoint_every + 1) * t.checkpoint_every]
        if self.route_setup.has_eval:
            bounds.append((step // t.eval_every + 1) * t.eval_every)
        return min(bounds)

    def _interrupted(self, start: int) -> TrainResult:
        """Foreground Ctrl-C is a stop: keep what was done. The state may be mid-update (its
        buffers donated); then the last periodic checkpoint is what remains."""
        saved = None
        step = self.reached
        try:
            self.flush()
            if step > start:
                self.checkpoint(step)
                self.finish(done=False)
                saved = step
        except (KeyboardInterrupt, TrainingDiverged, RuntimeError, ValueError) as e:
            log.warning("no checkpoint at the interrupt (%s)", e)
        at = saved if saved is not None else (self.latest_checkpoint() or start)
        self.session.settle("stopped", f"interrupted from the keyboard at step {at}; resume to continue",
                            step=at)
        self.result.state, self.result.step, self.result.message = "stopped", at, "interrupted"
        return self.result

    def latest_checkpoint(self) -> int | None:
        from adapters_lib.runs.checkpoints import latest_complete

        return latest_complete(self.run.checkpoints_dir)

    def _write(self, record: dict[str, Any]) -> None:
        self.session.metrics(record)
        t = self.cfg.train
        text = (f"step {record['step']}/{t.steps} loss {record['loss']:.4f} lr {record['lr']:.2e} "
                f"grad_norm {record['grad_norm'] or 0:.3f} {record.get('tokens_per_s') or 0:.0f} tok/s")
        if "eval_loss" in record:
            text += f" eval_loss {record['eval_loss']:.4f}"
        log.info("%s", text)


HookSource = Iterable[TrainHook] | Callable[[Any], Iterable[TrainHook]]


def run_trainer(trainer_cls: type[Trainer], cfg: Any, run_dir: str | Path | RunDir, *,
                control: Any = None, resume: bool = False, hooks: HookSource = ()) -> TrainResult:
    """Run ``trainer_cls`` on ``run_dir`` with the caller's ``hooks`` (see the module docstring).

    Raises ``RunOwned`` (nothing written) when another live process trains the run; any other
    error is recorded as the run's failure, then raised.
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    session = RunSession(cfg, run, control, [])
    lease.claim(run, "training")
    try:
        session.hooks = list(hooks(cfg) if callable(hooks) else hooks)
        status = run.status()
        if not resume and run.metrics():  # a restart (nothing to resume from): a fresh curve
            run.truncate_metrics_after(0)
            status["step"] = 0
        session.state("running", "resuming" if resume else "starting",
                      step=status.get("step", 0), total_steps=cfg.train.steps, pid=os.getpid())
        trainer = trainer_cls(session)
        result = trainer.train(resume)
        t0 = time.perf_counter()
        for hook in session.hooks:
            hook.on_end(result)
        if trainer.ending:
            trainer.ending["hooks"] = time.perf_counter() - t0
            log.info("run end %.1f s after the last step (%s)", sum(trainer.ending.values()),
                     ", ".join(f"{k} {v:.1f} s" for k, v in trainer.ending.items()))
        return result
    except KeyboardInterrupt:
        if run.state in ACTIVE_STATES:
            session.settle("stopped", "interrupted from the keyboard; resume from the last checkpoint")
        raise
    except BaseException as err:
        if isinstance(err, (SystemExit, GeneratorExit)):
            raise
        recorded = lifecycle.failure_recorded(err)
        status = lifecycle.record_failure(run, err, **getattr(err, "status_fields", {}))
        if not recorded:
            session.failed(status)
        if not isinstance(err, WorkbenchError):
            log.error("run %s failed: %s: %s", run.run_id, type(err).__name__, err)
        raise
    finally:
        lease.release(run)
