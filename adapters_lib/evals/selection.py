"""The best step of a run and the early stop, from its evals.

``Selection`` follows a run's tuned evals of one metric (``train.best_metric``): the best
value and its step, and how many evals have passed without improving by more than
``train.early_stop_min_delta``. ``should_stop`` is true once that count reaches
``train.early_stop_patience`` (0 = never). The base model is not a candidate: it has no
checkpoint.

``best_step(run)`` answers ``--step best`` (``BEST_STEP`` = -2 where a step travels as an
int; ``resolve_step``) for any run: the step the run recorded
(``status.json`` ``best_step``) when its checkpoint still exists, else the best checkpoint by
the run's evals (eval.jsonl, then metrics.jsonl ``eval_loss``): ``train.best_metric``, or
``loss`` when the run named none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import records
from adapters_lib.evals.metrics import best_index, improves
from adapters_lib.runs import RunDir

BEST_STEP = -2
"""``--step best`` as a step number where an API field is an int (-1 = the latest)."""


@dataclass
class Selection:
    metric: str
    patience: int = 0
    min_delta: float = 0.0
    best_step: int | None = None
    best_value: float | None = None
    since_best: int = 0
    """Evals since the best one (0 right after an improvement)."""

    def update(self, step: int, value: float | None) -> bool:
        """One tuned eval; True when it is the new best."""
        if value is None:
            return False
        if improves(self.metric, value, self.best_value, self.min_delta):
            self.best_step, self.best_value, self.since_best = int(step), float(value), 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.best_step is not None and self.since_best >= self.patience

    def to_status(self) -> dict[str, Any]:
        return {"best_metric": self.metric, "best_step": self.best_step,
                "best_value": self.best_value, "evals_since_best": self.since_best}

    @classmethod
    def replay(cls, rows: list[dict[str, Any]], metric: str, *, patience: int = 0,
               min_delta: float = 0.0, upto: int | None = None) -> Selection:
        """The selection after the tuned rows (up to step ``upto``): a resumed run's state."""
        sel = cls(metric, patience, min_delta)
        for row in sorted((r for r in rows if r["phase"] == "tuned"), key=lambda r: r["step"]):
            if upto is None or row["step"] <= upto:
                sel.update(row["step"], row.get(metric))
        return sel


def selection_metric(train: Any) -> str:
    """The metric a run selects by: ``train.best_metric``; "loss" when only the early stop is on."""
    return train.best_metric or ("loss" if train.early_stop_patience > 0 else "")


def candidates(run: RunDir, metric: str) -> dict[int, float]:
    """{step: value} of ``metric`` at each tuned eval of the run (eval.jsonl; for ``loss``,
    metrics.jsonl's ``eval_loss`` fills steps eval.jsonl lacks)."""
    values = {r["step"]: r[metric] for r in records.read_rows(run, "tuned") if metric in r}
    if metric == "loss":
        for m in run.metrics():
            if "eval_loss" in m and isinstance(m.get("step"), int):
                values.setdefault(m["step"], float(m["eval_loss"]))
    return values


def best_step(run: RunDir | str | Path, metric: str = "") -> tuple[int, str, float | None]:
    """(step, metric, value) of the run's best checkpoint (see the module doc)."""
    run = run if isinstance(run, RunDir) else RunDir(Path(run))
    steps = run.checkpoints()
    if not steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint yet", where=str(run.checkpoints_dir),
                             hint="wait for the first checkpoint (train.checkpoint_every) or resume it")
    status = run.status()
    if not metric:
        try:
            metric = selection_metric(run.config().train) or "loss"
        except WorkbenchError:
            metric = str(status.get("best_metric") or "loss")
    recorded = status.get("best_step")
    if status.get("best_metric") == metric and isinstance(recorded, int) and recorded in steps:
        return recorded, metric, status.get("best_value")
    values = candidates(run, metric)
    scored = [s for s in steps if s in values]
    if not scored:
        raise WorkbenchError(f"run {run.run_id} has no {metric} eval at any of its checkpoints "
                             f"({', '.join(map(str, steps))})", where="--step best",
                             hint="give a step number, or score the checkpoints with "
                                  f"`gemma-workbench eval --run {run.run_id} --all-checkpoints`")
    i = best_index(metric, [values[s] for s in scored])
    assert i is not None
    return scored[i], metric, values[scored[i]]


def resolve_step(run: RunDir | str | Path, step: int | None) -> int | None:
    """``step`` with ``BEST_STEP`` replaced by the run's best checkpoint (``best_step``)."""
    return best_step(run)[0] if step == BEST_STEP else step
