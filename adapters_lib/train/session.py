"""One run as a trainer sees it (``RunSession``), and the records the trainer and hooks share.

``RunSession`` is the context every hook gets: state (status.json through ``runs`` and its
lifecycle), events, metrics (each also sent to the engine's ``TrainControl`` and to the
hooks), the stop decision (the engine's request, or a hook's ``should_stop``), how a run ends
early (``end_early``: stopped on request, resumable; completed when a hook ended it), the
resume point (``runs.checkpoints``' one rule) and the divergence error.

Hooks return metric fields instead of writing into the trainer's records: what ``on_start``
returns is the run's start fields (``started``: e.g. ``base_exact_match``), what ``on_eval``
returns joins that eval step's metrics record (``evaluated``). During ``on_start`` and
``on_eval`` ``session.probe`` (``ModelProbe``) is the model as trained so far;
``session.pin(step)`` keeps a checkpoint whatever ``train.keep_checkpoints`` says (a best
checkpoint), ``session.request_checkpoint(step)`` in ``on_eval`` asks for one at that step.
Importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import RunDir, lease
from adapters_lib.runs.checkpoints import latest_complete
from adapters_lib.train.hooks import TrainHook

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
    """The eval split's mean loss at the current params, by the route's own eval (what
    ``eval_loss`` in metrics.jsonl measures); None without an eval split."""
    trainable_params: int | None = None
    """How many values the run trains (the adapters, or every param of a full fine-tune)."""
    base_fingerprint: Callable[[], dict[str, Any] | None] = lambda: None
    """What the route's score of the base model (step 0) depends on, JSON-able (model, files,
    dtypes, mesh, objective, eval batches); None: not reusable (``evals.base_scores``)."""


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


def _fields(out: Any) -> dict[str, Any]:
    return dict(out) if isinstance(out, dict) else {}


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

    def set_up(self) -> None:
        """The route is set up (its model loaded, its programs queued), nothing compiled in the
        foreground yet: ``on_setup``."""
        for hook in self.hooks:
            on_setup = getattr(hook, "on_setup", None)  # hooks are duck-typed: it is optional
            if on_setup is not None:
                on_setup(self)

    def started(self, step: int) -> dict[str, Any]:
        """The route is set up (and restored when resuming): ``on_start`` with the probe; the
        fields the hooks return (e.g. ``base_exact_match``)."""
        fields: dict[str, Any] = {}
        for hook in self.hooks:
            fields.update(_fields(hook.on_start(self, step)))
        return fields

    def evaluated(self, step: int, results: dict[str, Any]) -> dict[str, Any]:
        """Eval results of ``step`` (called at that step: the probe holds its params); the
        fields the hooks return, for that step's metrics record."""
        fields: dict[str, Any] = {}
        for hook in self.hooks:
            fields.update(_fields(hook.on_eval(step, results)))
        return fields

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
