"""The trainer hooks of the evaluation area (``train.trainer.TrainHook``), for both routes.

``default_hooks(cfg)`` is what every run gets, on either route: the callers of the trainer
(the engine, the CLI, multi-host workers) pass it as ``run_training(hooks=default_hooks)``.

- ``EvalHook`` scores the model as trained so far (``session.probe``: in ``on_start`` the base
  of a fresh run, in ``on_eval`` the tuned model of that eval step) with the run's
  ``EvalPlan`` and appends the ``eval.jsonl`` row; for ``exact_match`` at the base and the end
  it also writes the ``exact_match`` events and ``exact_match_base`` / ``exact_match_tuned``
  in status.json, and returns its fields to the trainer: ``base_exact_match`` from
  ``on_start``, ``eval_exact_match`` / ``base_exact_match`` from the last ``on_eval`` (they
  join the last metrics record and the result);
- ``BestHook`` follows ``train.best_metric`` over the tuned rows: a new best asks the route
  for a checkpoint at that step (``session.request_checkpoint``) and is pinned
  (``session.pin``: kept whatever ``keep_checkpoints`` says; the previous best unpinned);
  status.json gets ``best_metric``, ``best_step``, ``best_value``;
  ``train.early_stop_patience`` evals without improvement stop the run (``should_stop``: the
  run ends ``completed``, the reason in its message);
- ``TensorBoardHook`` writes the run's TensorBoard events (``tensorboard_log``);
- ``RunFactsHook`` records what a sweep's table reads: the sweep and point, the trainable
  params, the peak memory seen, the wall time.

Every process of a multi-host run computes (the scoring runs device code on every host);
only the one that records (``session.run.records``, not a follower) writes files.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from typing import Any

from adapters_lib.evals import base_scores, records
from adapters_lib.evals.plan import EvalPlan, plan_for
from adapters_lib.evals.selection import Selection
from adapters_lib.evals.task import Scored, TaskSet, likelihood
from adapters_lib.train.hooks import TrainHook

log = logging.getLogger(__name__)


def _records(session: Any) -> bool:
    return getattr(session.run, "records", True)


class EvalHook(TrainHook):
    name = "eval metrics"

    def __init__(self, cfg: Any, plan: EvalPlan | None = None, listeners: tuple[Any, ...] = ()):
        self.cfg = cfg
        self.plan = plan or plan_for(cfg)
        self.listeners = list(listeners)
        self.tasks: TaskSet | None = None
        self.session: Any = None
        self.base_em: float | None = None
        self.tuned_em: float | None = None

    def on_start(self, session: Any, step: int) -> dict[str, Any]:
        """The route is set up: a fresh run scores its base model here; a resumed one drops
        the rows past its checkpoint (its base score is the one this hook recorded)."""
        self.session = session
        if step > 0:
            if _records(session):
                records.truncate_after(session.run, step)
            self.base_em = session.run.status().get("exact_match_base")
        elif session.probe is not None:
            self.score_base(step)
        return {} if self.base_em is None else {"base_exact_match": self.base_em}

    def score_base(self, step: int) -> None:
        """The base model's score: read back when this model, data and eval settings were
        scored before (``evals.base_scores``), else measured and kept."""
        probe = self.session.probe
        key = base_scores.key_for(probe.base_fingerprint(), {
            "plan": dataclasses.asdict(self.plan), "max_length": self.cfg.data.max_length,
            "examples": base_scores.digest(list(probe.eval_examples)) if self.plan.generated else ""})
        kept = base_scores.lookup(key)
        if kept is not None:
            log.info("eval (base): the scores of an earlier run with this model, data and eval "
                     "settings (not computed again)")
            scored = Scored(**kept["scored"]) if kept.get("scored") else None
            self.record(step, "base", kept["values"], scored)
            return
        values, scored = self.measure(step, "base", probe.eval_loss() if self.plan.likelihood else None)
        base_scores.store(key, values, dataclasses.asdict(scored) if scored else None)
        self.record(step, "base", values, scored)

    def on_eval(self, step: int, results: dict[str, Any]) -> dict[str, Any]:
        """A tuned eval at ``step`` (the probe holds that step's params); the end's exact-match
        fields for that step's record."""
        if "eval_loss" in results and self.session is not None and self.session.probe is not None:
            return self.score(step, "tuned", results["eval_loss"])
        return {}

    def score(self, step: int, phase: str, loss: float | None) -> dict[str, Any]:
        return self.record(step, phase, *self.measure(step, phase, loss))

    def measure(self, step: int, phase: str, loss: float | None) -> tuple[dict[str, float], Scored | None]:
        """The values of this eval (and the generated metrics' ``Scored``)."""
        plan, probe = self.plan, self.session.probe
        values = likelihood(loss, plan.likelihood)
        scored = None
        end = phase == "base" or step >= self.cfg.train.steps
        generated = [m for m in plan.generated if end or m not in plan.ends_only]
        if generated:
            if self.tasks is None:
                self.tasks = TaskSet(probe.tokenizer, probe.eval_examples, plan,
                                     max_length=self.cfg.data.max_length)
            with probe.scope():
                scored = self.tasks.score(probe.apply_fn, probe.params(), generated)
            values.update(scored.values)
        return values, scored

    def record(self, step: int, phase: str, values: dict[str, float], scored: Scored | None) -> dict[str, Any]:
        """The eval.jsonl row, the log lines, the listeners and the exact-match fields."""
        if not values:
            return {}
        row = records.make_row(step, phase, values)
        shown = " ".join(f"{k} {v:.4f}" for k, v in row.items() if k not in ("step", "phase"))
        log.info("eval (%s, step %d): %s%s", phase, step, shown,
                 f" — {scored.answered} answers in {scored.seconds:.1f}s" if scored else "")
        for s in (scored.samples if scored else []):
            log.info("  %r → %r (ref %r)", s["prompt"], s["prediction"], s["reference"])
        if _records(self.session):
            records.append_row(self.session.run, step, phase, values)
        for listener in self.listeners:
            listener(row)
        return self._exact_match(step, phase, row, scored)

    def _exact_match(self, step: int, phase: str, row: dict[str, Any], scored: Any) -> dict[str, Any]:
        """Exact-match at the base and the end: its event, status fields, and record fields."""
        em = row.get("exact_match")
        if em is None or scored is None or (phase == "tuned" and step < self.cfg.train.steps):
            return {}
        self.session.event("exact_match", phase=phase, step=step, exact_match=em,
                           correct=scored.correct, total=scored.answered, per_task=scored.per_task)
        self.session.progress(**{f"exact_match_{phase}": em})
        if phase == "base":
            self.base_em = em
            return {}
        self.tuned_em = em
        return {"eval_exact_match": em, "base_exact_match": self.base_em}


class BestHook(TrainHook):
    name = "train.early_stop_patience"

    def __init__(self, plan: EvalPlan):
        self.plan = plan
        self.selection = Selection(plan.select, plan.patience, plan.min_delta)
        self.session: Any = None

    def on_start(self, session: Any, step: int) -> None:
        self.session = session
        if step > 0:
            self.selection = Selection.replay(records.read_rows(session.run), self.plan.select,
                                              patience=self.plan.patience,
                                              min_delta=self.plan.min_delta, upto=step)
            if self.selection.best_step is not None:
                session.pin(self.selection.best_step)

    def row(self, row: dict[str, Any]) -> None:
        """A tuned row (from ``EvalHook``, during ``on_eval`` of its step)."""
        if row["phase"] != "tuned":
            return
        before = self.selection.best_step
        if self.selection.update(row["step"], row.get(self.plan.select)):
            if before is not None:
                self.session.unpin(before)  # retention may take the old best now
            self.session.pin(row["step"])
            self.session.request_checkpoint(row["step"])  # the best always has a checkpoint
        self.session.progress(**self.selection.to_status())
        if self.selection.should_stop:
            s = self.selection
            log.info("early stop: no better %s in %d evals (best %.4f at step %d)", s.metric,
                     s.since_best, s.best_value, s.best_step)

    def should_stop(self) -> bool:
        return self.selection.should_stop


class TensorBoardHook(TrainHook):
    name = "tensorboard"

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.events: Any = None
        self.session: Any = None

    def on_start(self, session: Any, step: int) -> None:
        from adapters_lib.tensorboard_log import RunEvents

        self.session = session
        if not _records(session):
            return
        self.events = RunEvents(session.run.path, purge_step=step + 1 if step > 0 else None)
        weakref.finalize(self, self.events.close)  # a failed run gets no on_end
        if step == 0 and session.run.config_path.is_file():
            self.events.config(session.run.config_path.read_text(encoding="utf-8"))

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.metrics(metrics)

    def row(self, row: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.eval_row(row)
            self.events.flush()

    def on_checkpoint(self, step: int) -> None:
        if self.events is not None:
            self.events.flush()

    def on_end(self, result: Any) -> None:
        if self.events is None:
            return
        point = self.cfg.sweep.point
        if point:
            final = records.final_values(records.read_rows(self.session.run))
            if not final and result.final_eval_loss is not None:
                final = {"loss": result.final_eval_loss}
            self.events.hparams(point, final, step=result.step)
        self.events.close()


class RunFactsHook(TrainHook):
    """status.json: ``sweep``/``point``, ``trainable_params``, ``peak_bytes``, ``wall_s``."""

    name = "run facts"
    EVERY_S = 30.0

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.session: Any = None
        self.t0 = time.monotonic()
        self.prior_wall = 0.0
        self.peak: int | None = None
        self.trainable: int | None = None
        self.last_write = 0.0

    def on_start(self, session: Any, step: int) -> None:
        self.session = session  # self.t0 is when the hook was made: the run's start, set-up included
        status = session.run.status()
        if step > 0 and isinstance(status.get("wall_s"), (int, float)):
            self.prior_wall = float(status["wall_s"])
        probe = session.probe
        if probe is not None and probe.trainable_params is not None:
            self.trainable = int(probe.trainable_params)
        sweep = {"sweep": self.cfg.sweep.id, "point": self.cfg.sweep.point} if self.cfg.sweep.id else {}
        session.progress(**sweep, **self.facts())  # a sweep's table has them from the first step

    def facts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"wall_s": round(self.prior_wall + time.monotonic() - self.t0, 3)}
        if self.peak is not None:
            out["peak_bytes"] = self.peak
        if self.trainable is not None:
            out["trainable_params"] = self.trainable
        return out

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        self.peak = max(self.peak or 0, peak_bytes() or 0) or None
        now = time.monotonic()
        if now - self.last_write > self.EVERY_S:
            self.last_write = now
            self.session.progress(**self.facts())

    def on_end(self, result: Any) -> None:
        run = self.session.run
        if _records(self.session):
            run.write_status(run.state, **self.facts())


def peak_bytes() -> int | None:
    """The peak device memory the backend reports (GPU/TPU ``peak_bytes_in_use``; the most of
    any local device), else this process's resident memory now (CPU: device memory is host
    memory)."""
    import sys

    jax = sys.modules.get("jax")
    if jax is not None:
        peaks = []
        for d in jax.local_devices():
            try:
                stats = d.memory_stats() or {}
            except Exception:  # noqa: BLE001 - CPU devices have none
                stats = {}
            if isinstance(stats.get("peak_bytes_in_use"), int):
                peaks.append(stats["peak_bytes_in_use"])
        if peaks:
            return max(peaks)
    try:
        import os

        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def default_hooks(cfg: Any) -> list[TrainHook]:
    """The hooks every run gets (see the module doc), wired together."""
    plan = plan_for(cfg)
    best = BestHook(plan) if plan.select else None
    tensorboard = TensorBoardHook(cfg)
    listeners = tuple(x.row for x in (best, tensorboard) if x is not None)
    # the listeners start first: the eval hook scores the base model in its on_start
    hooks: list[TrainHook] = [tensorboard, RunFactsHook(cfg)]
    if best is not None:
        hooks.append(best)
    return [*hooks, EvalHook(cfg, plan, listeners)]
