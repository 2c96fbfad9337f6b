"""TensorBoard event files in a run directory (tensorboardX), so ``tensorboard --logdir
<runs dir>`` shows every run.

What a run writes (``events.out.tfevents.*`` in the run directory itself, so TensorBoard
names the run by its id):

- a scalar for every number in each ``metrics.jsonl`` record, under the record's own key
  (``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``, ``eval_loss``, …), at its ``step``;
- a scalar for every metric of each ``eval.jsonl`` row, tagged ``<phase>/<metric>``
  (``tuned/rouge_l``, ``base/loss``);
- the resolved config as text (tag ``config``, step 0);
- for a run of a sweep, its point as hparams (``<run dir>/hparams/``: TensorBoard's HParams
  tab lists the sweep's points with their final metrics, tagged ``hparam/<metric>``).

A resumed run opens a new event file with ``purge_step`` = the resume step + 1: TensorBoard
drops the older file's events from that step on, as the run's metrics.jsonl does.
``write_run_events(run_dir)`` writes all of it from the run's files after the fact (runs made
before this existed).
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

HPARAMS_DIR = "hparams"
FLUSH_SECS = 10
_WRITERS = itertools.count(1)
"""tensorboardX names a file by the second it opened: two writers of one run in the same
second (a resume, a rewrite) would share a name; a pid.counter suffix keeps them apart."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def hparam_value(value: Any) -> bool | str | float | int:
    """A point's value as TensorBoard takes it (a list of targets becomes "q v")."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


class RunEvents:
    """One run's TensorBoard writer (see the module doc). Cheap to make; tensorboardX is
    imported on first use."""

    def __init__(self, run_dir: str | Path, *, purge_step: int | None = None,
                 flush_secs: int = FLUSH_SECS):
        self.dir = Path(run_dir)
        self.purge_step = purge_step
        self.flush_secs = flush_secs
        self._writer: Any = None

    @property
    def writer(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(logdir=str(self.dir), purge_step=self.purge_step,
                                         flush_secs=self.flush_secs,
                                         # zero-padded: TensorBoard reads a run's files in
                                         # name order, and writers of one second must keep
                                         # theirs (".10" sorted before ".9": a resume's steps
                                         # came first)
                                         filename_suffix=f".{os.getpid()}.{next(_WRITERS):06d}")
        return self._writer

    def metrics(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if not isinstance(step, int):
            return
        for key, value in record.items():
            x = _number(value)
            if key != "step" and x is not None:
                self.writer.add_scalar(key, x, step)

    def eval_row(self, row: dict[str, Any]) -> None:
        step, phase = row.get("step"), row.get("phase")
        if not isinstance(step, int) or not isinstance(phase, str):
            return
        for key, value in row.items():
            x = _number(value)
            if key not in ("step", "phase") and x is not None:
                self.writer.add_scalar(f"{phase}/{key}", x, step)

    def config(self, toml_text: str) -> None:
        # Markdown: an indented block keeps the TOML as written
        body = "\n".join("    " + line for line in toml_text.splitlines())
        self.writer.add_text("config", body, 0)

    def hparams(self, point: dict[str, Any], final: dict[str, Any], step: int | None = None) -> None:
        """The sweep point and its final metrics (``hparam/<metric>``), for the HParams tab."""
        values = {k: hparam_value(v) for k, v in point.items()}
        metric_values = {f"hparam/{k}": x for k, v in final.items() if (x := _number(v)) is not None}
        if values and metric_values:
            self.writer.add_hparams(values, metric_values, name=HPARAMS_DIR, global_step=step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_run_events(run_dir: str | Path) -> Path:
    """Write a finished run's events from its files (metrics.jsonl, eval.jsonl, config.toml);
    earlier event files of the run are superseded from step 0 (``purge_step=0``)."""
    from adapters_lib.evals import records
    from adapters_lib.runs import RunDir

    run = RunDir(Path(run_dir))
    events = RunEvents(run.path, purge_step=0)
    try:
        if run.config_path.is_file():
            events.config(run.config_path.read_text(encoding="utf-8"))
        for record in run.metrics():
            events.metrics(record)
        rows = records.read_rows(run)
        for row in rows:
            events.eval_row(row)
        cfg = run.config() if run.config_path.is_file() else None
        if cfg is not None and cfg.sweep.point:
            final = records.final_values(rows) or {
                k: v for k, v in (run.metrics()[-1:] or [{}])[0].items() if k != "step"}
            events.hparams(cfg.sweep.point, final)
    finally:
        events.close()
    return run.path
