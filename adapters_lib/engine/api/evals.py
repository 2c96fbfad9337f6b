"""The evaluation area's commands and replies: sweeps' results, checkpoints scored.

- ``ListSweeps`` (``GET /sweeps``) and ``GetSweep`` (``GET /sweeps/{sweep_id}``): a sweep's
  results table, read from its runs' directories (``adapters_lib.sweeps.results``); the
  reply of ``GetSweep`` is ``sweep show SWEEP --json`` (contract).
- ``EvalCheckpoints`` (``POST /eval/checkpoints``): the base and every checkpoint of a run
  scored on its eval split or a data file (``adapters_lib.evals.checkpoints``), on the
  device thread; ``eval --run R --all-checkpoints``.

Registered in ``COMMANDS`` on import (``adapters_lib.engine.api`` imports this module).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.engine.api.commands import COMMANDS, Command, Route
from adapters_lib.jsontypes import Record, record

__all__ = ["SweepPoint", "SweepResults", "SweepInfo", "SweepList", "ListSweeps", "GetSweep",
           "EvalTable", "EvalCheckpoints"]


@record
class SweepPoint(Record):
    """One point of a sweep: its run and results. The ranking metric's final value travels
    under the metric's own name (``"loss": 1.2``; read it with ``value(metric)``)."""

    point: dict[str, Any] = dataclasses.field(default_factory=dict)
    run_id: str = ""
    state: str = "queued"
    best_step: int | None = None
    best_value: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """The final eval metrics (the run's last tuned eval.jsonl row)."""
    wall_s: float | None = None
    peak_bytes: int | None = None
    trainable_params: int | None = None
    index: int | None = None
    """The point's place in the grid (1-based)."""
    step: int = 0
    total_steps: int = 0
    dir: str = ""

    def value(self, metric: str) -> float | None:
        v = self.extra.get(metric)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@record
class SweepResults(Record):
    """``sweep show SWEEP --json`` (contract): ``{"sweep", "metric", "best", "points"}``."""

    sweep: str
    metric: str = "loss"
    best: SweepPoint | None = None
    """The point whose ``metric`` is best (None until a point has a value)."""
    points: list[SweepPoint] = dataclasses.field(default_factory=list)


@record
class SweepInfo(Record):
    sweep: str
    metric: str = "loss"
    points: int = 0
    states: dict[str, int] = dataclasses.field(default_factory=dict)


@record
class SweepList(Record):
    sweeps: list[SweepInfo] = dataclasses.field(default_factory=list)


@record
class ListSweeps(Command):
    name = "list_sweeps"
    route = Route("GET", "/sweeps", "query")
    reply = SweepList


@record
class GetSweep(Command):
    name = "get_sweep"
    route = Route("GET", "/sweeps/{sweep_id}", "query")
    reply = SweepResults
    sweep_id: str = ""
    """The sweep id, or a unique prefix of it."""
    metric: str = ""
    """Rank by this metric ("" = the sweep's own)."""


@record
class EvalTable(Record):
    """``eval --run R --all-checkpoints --json``: one row per checkpoint (and the base)."""

    run: str
    data: str = ""
    metrics: list[str] = dataclasses.field(default_factory=list)
    metric: str = "loss"
    """The metric that names ``best_step``."""
    best_step: int | None = None
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """``{"step", "phase": "base"|"tuned", "<metric>": value, ..., "tokens"}``."""
    examples: int = 0
    seconds: float = 0.0


@record
class EvalCheckpoints(Command):
    name = "eval_checkpoints"
    route = Route("POST", "/eval/checkpoints")
    needs_jax = touches_devices = True
    reply = EvalTable
    run_id: str = ""
    """A run id, unique prefix or absolute run folder."""
    data: str = ""
    """A data file or folder (absolute); "" = the run's eval split."""
    metrics: tuple[str, ...] = ()
    """"" = the run's ``train.eval_metrics``."""
    batch_size: int = 4


COMMANDS.update({c.name: c for c in (ListSweeps, GetSweep, EvalCheckpoints)})
