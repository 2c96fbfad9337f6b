"""One trainer interface for both routes, with hooks (after tunix's ``abstract_trainer``).

A route (the gemma loop, ``train.loop.GemmaTrainer``; the Keras route,
``keras_route.train.KerasTrainer``) implements ``Trainer.train(resume)``: the steps, the
evals, the checkpoints. Everything a run shares goes through its ``RunSession``:

- state (status.json through ``runs`` and its lifecycle), events, metrics (each also sent to
  the engine's ``TrainControl`` and to the hooks);
- the stop decision (the engine's request, or a hook's ``should_stop``) and how a run ends
  early (``end_early``: stopped on request, resumable; completed when a hook ended it);
- the resume point (``runs.checkpoints``' one rule) and the divergence error.

``run_trainer`` is the harness around a route: it claims the run's owner lease, writes
``running``, runs the route, and records a failure in **one** place
(``runs.lifecycle.record_failure``) whatever the error — a config mistake, a folder that
vanished, a full disk, a NaN loss, a bug. A Ctrl-C is a stop. Importing this module is cheap.

Hooks (``TrainHook``) add per-step, per-eval and per-checkpoint behaviour without touching the
routes (eval metrics, best-checkpoint selection, early stopping, TensorBoard):
``on_start(session, step)``, ``on_step(step, metrics)``, ``on_eval(step, results)``,
``on_checkpoint(step)``, ``should_stop()``, ``on_end(result)``. A hook that raises fails the
run like any other error (a hook is part of the run). During ``on_start`` and ``on_eval``
``session.probe`` (``ModelProbe``) is the model as trained so far (apply function, current
params, tokenizer, eval examples, the eval loss) for hooks that score it;
``session.pin(step)`` keeps a checkpoint whatever ``train.keep_checkpoints`` says (a best
checkpoint), ``session.request_checkpoint(step)`` in ``on_eval`` asks for one at that eval step,
``session.final_fields`` joins the last metrics record; ``config_hooks`` is where hooks a
config asks for are made, for every run of either route.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import ACTIVE_STATES, RunDir, lease, lifecycle
from adapters_lib.runs.checkpoints import latest_complete
from adapters_lib.train.hooks import TrainHook  # noqa: F401  (its home; kept importable here)

log = logging.getLogger(__name__)


class TrainControl(Protocol):
    """What the engine hands a run: the stop request, live streams, jobs between steps."""

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


@dataclass
class ModelProbe:
    """The model as trained so far, for hooks that score it (valid in ``on_start``/``on_eval``).

    ``apply_fn(params, tokens, positions, mask) -> logits`` with ``params()`` (the current
    params, read at call time: never keep them past the hook call, the next step may reuse
    their buffers) is what ``evaluate.greedy_answers`` takes; ``scope()`` is the context to
    run it in (the Keras route's distribution).
    """

    route: str
    apply_fn: Callable[..., Any]
    params: Callable[[], Any]
    tokenizer: Any
    eval_examples: Sequence[dict[str, Any]] = ()
    scope: Callable[[], Any] = contextlib.nullcontext
    eval_loss: Callable[[], float | None] = lambda: None
    """The eval split's mean token loss at the current params, by the route's own eval (what
    ``eval_loss`` in metrics.jsonl measures); None without an eval split."""
    trainable_params: int | None = None
    """How many values the run trains (the adapters, or every param of a full fine-tune)."""


def config_hooks(cfg: Any, run: RunDir) -> list[Any]:
    """The hooks ``cfg`` asks for, before any the caller adds: the evaluation area's
    (``evals.hooks.default_hooks``: task metrics into eval.jsonl, best checkpoint, early stop,
    TensorBoard events, run facts)."""
    from adapters_lib.evals.hooks import default_hooks

    return default_hooks(cfg)


class TrainingDiverged(WorkbenchError):
    """The loss became NaN or infinite; the run is ``failed``, its last good checkpoint kept."""

    def __init__(self, message: str, *, step: int, where: str | None = None, hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.step = step
        self.status_fields: dict[str, Any] = {}


def diverged(cfg: Any, what: str, step: int) -> TrainingDiverged:
    """The divergence error both routes raise (``what``: e.g. "loss became nan")."""
    t = cfg.train
    return TrainingDiverged(
        f"{what} at step {step}", step=step, where="[train] learning_rate",
        hint=f"lower train.learning_rate (now {t.learning_rate:g}), e.g. to "
             f"{t.learning_rate / 10:g}, or keep train.clip_norm on (now {t.clip_norm:g}); "
             "the last good checkpoint is kept")


def finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


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


class RunSession:
    """One run as a trainer sees it: the run dir, the engine's control and the hooks."""

    def __init__(self, cfg: Any, run: RunDir, control: Any = None, hooks: Sequence[TrainHook] = ()):
        self.cfg = cfg
        self.run = run
        self.control = control or NullControl()
        self.hooks = list(hooks)
        self.stop_reason = ""
        self.stopped_by_hook = ""
        self.probe: ModelProbe | None = None
        self.pinned: set[int] = set()
        self.requested: set[int] = set()
        """Eval steps a hook wants a checkpoint at (a new best between checkpoint steps)."""
        self.final_fields: dict[str, Any] = {}
        """Fields hooks add to the run's last metrics record (exact-match's, for instance)."""

    # ---------------------------------------------------------------- records
    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = self.run.append_event(kind, **fields)
        self.control.on_event(record)
        return record

    def state(self, state: str, message: str = "", **fields: Any) -> dict[str, Any]:
        """A state change (running, stopping) with its event."""
        extra = {"message": message} if message else {}
        status = self.run.write_status(state, **fields, **extra) or {}
        self.event("state", state=state, step=status.get("step", 0), **extra)
        return status

    def progress(self, **fields: Any) -> None:
        """Update status.json while running (no event)."""
        self.run.write_status("running", **fields)

    def metrics(self, record: dict[str, Any]) -> None:
        self.run.append_metrics(record)
        self.control.on_metrics(record)
        for hook in self.hooks:
            hook.on_step(int(record["step"]), record)

    def started(self, step: int) -> None:
        """The route is set up (and restored when resuming): ``on_start`` with the probe."""
        for hook in self.hooks:
            hook.on_start(self, step)

    def evaluated(self, step: int, results: dict[str, Any]) -> None:
        """Eval results of ``step`` (called at that step: the probe holds its params)."""
        for hook in self.hooks:
            hook.on_eval(step, results)

    def pin(self, step: int) -> None:
        """Keep checkpoint ``step`` through retention (e.g. the best one so far)."""
        self.pinned.add(int(step))

    def unpin(self, step: int) -> None:
        self.pinned.discard(int(step))

    def request_checkpoint(self, step: int) -> None:
        """Ask the route for a checkpoint at ``step`` (called from ``on_eval`` of that step)."""
        self.requested.add(int(step))

    def checkpointed(self, step: int) -> None:
        self.event("checkpoint", step=step)
        for hook in self.hooks:
            hook.on_checkpoint(step)

    def sync(self) -> None:
        """Make the metrics written so far durable (before a checkpoint is written)."""
        self.run.sync_metrics()

    # ---------------------------------------------------------------- control
    def should_stop(self) -> bool:
        """Asked once a step: the engine's stop request, or a hook's."""
        if self.control.should_stop():
            self.stop_reason = self.stop_reason or "stopped on request"
            return True
        for hook in self.hooks:
            if hook.should_stop():
                self.stopped_by_hook = hook.name or type(hook).__name__
                self.stop_reason = f"stopped early by {self.stopped_by_hook}"
                return True
        return False

    def between_steps(self) -> None:
        self.control.between_steps()

    def resume_point(self) -> int:
        """The step to resume from: the newest complete, finite checkpoint."""
        step = latest_complete(self.run.checkpoints_dir)
        if step is None:
            raise WorkbenchError(f"run {self.run.run_id} has no checkpoint to resume from",
                                 where=str(self.run.checkpoints_dir),
                                 hint="start a new run with `gemma-workbench train`")
        return step

    def resumed(self, step: int) -> None:
        self.run.truncate_metrics_after(step)
        self.event("resumed", step=step)
        log.info("resumed %s at step %d", self.run.run_id, step)

    # ---------------------------------------------------------------- endings
    def end_early(self, step: int, result: TrainResult) -> TrainResult:
        """After the stop checkpoint: ``stopped`` (a request; resumable) or ``completed`` (a hook)."""
        if self.stopped_by_hook:
            result.state, result.message = "completed", self.stop_reason
            self.settle("completed", f"{self.stop_reason} at step {step}", step=step,
                        final_loss=result.final_loss, final_eval_loss=result.final_eval_loss)
        else:
            result.state, result.message = "stopped", self.stop_reason
            self.settle("stopped", f"{self.stop_reason} at step {step}; resume to continue", step=step,
                        **({"loss": result.final_loss} if result.final_loss is not None else {}))
        return result

    def settle(self, state: str, message: str = "", **fields: Any) -> None:
        """The run's own end (stopped, completed): state, event, lease released. The status's
        ``loss`` (written at most once a second while training) becomes the last step's."""
        if fields.get("final_loss") is not None:
            fields.setdefault("loss", fields["final_loss"])
        self.state(state, message, **fields)
        lease.release(self.run)

    def failed(self, status: dict[str, Any]) -> None:
        """Tell the engine's stream about a failure ``lifecycle.record_failure`` recorded."""
        self.control.on_event({"time": status.get("updated"), "kind": "state", "state": "failed",
                               "step": status.get("step", 0), "message": status.get("message", "")})

    def failed_divergence(self, err: TrainingDiverged, kept: list[int]) -> None:
        """Fields the failure of a diverged run records (its last good checkpoint)."""
        err.status_fields = {"step": max(err.step - 1, 0),
                             "last_good_checkpoint": kept[-1] if kept else None}


class Trainer(abc.ABC):
    """A training route over one ``RunSession``."""

    route: ClassVar[str] = ""

    def __init__(self, session: RunSession):
        self.session = session
        self.cfg = session.cfg
        self.run = session.run

    @abc.abstractmethod
    def train(self, resume: bool) -> TrainResult:
        """Train to ``train.steps`` (from the last checkpoint when ``resume``); see the module."""


def run_trainer(trainer_cls: type[Trainer], cfg: Any, run_dir: str | Path | RunDir, *,
                control: Any = None, resume: bool = False,
                hooks: Iterable[TrainHook] = ()) -> TrainResult:
    """Run ``trainer_cls`` on ``run_dir`` (see the module docstring).

    Raises ``RunOwned`` (nothing written) when another live process trains the run; any other
    error is recorded as the run's failure, then raised.
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    session = RunSession(cfg, run, control, list(hooks))
    lease.claim(run, "training")
    try:
        session.hooks[:0] = config_hooks(cfg, run)
        status = run.status()
        if not resume and run.metrics():  # a restart (nothing to resume from): a fresh curve
            run.truncate_metrics_after(0)
            status["step"] = 0
        session.state("running", "resuming" if resume else "starting",
                      step=status.get("step", 0), total_steps=cfg.train.steps, pid=os.getpid())
        result = trainer_cls(session).train(resume)
        for hook in session.hooks:
            hook.on_end(result)
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
