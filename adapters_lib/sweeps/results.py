"""A sweep's results, read from its runs' directories: ``summary(runs, sweep_id)``.

The runs of a sweep are found by their ``config.toml`` (``[sweep] id``); nothing else records
a sweep, so a deleted run simply leaves it. One entry per point (contract, ``sweep show SWEEP
--json``)::

    {"sweep": ID, "metric": "loss", "best": <the best point's entry>,
     "points": [{"point": {...}, "run_id", "state", "<metric>": final value,
                 "best_step", "best_value", "metrics": {final eval metrics},
                 "wall_s", "peak_bytes", "trainable_params", "index"}, ...]}

``<metric>`` is the point's value at the end of its run (its last tuned eval); ``best`` is
the point whose value is best in the metric's direction (None until one has a value);
``best_step`` is the run's best eval of the metric. ``wall_s``, ``peak_bytes`` and
``trainable_params`` are what the run recorded in ``status.json``; ``wall_s`` of a run that
recorded none comes from its events (first ``running`` to its end, or to now).
Points are listed in grid order.
"""

from __future__ import annotations

import time
import tomllib
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import records
from adapters_lib.evals.metrics import best_index
from adapters_lib.evals.selection import candidates
from adapters_lib.runs import RunDir
from adapters_lib.runs.state import TERMINAL_STATES, RunState


class NoSuchSweep(WorkbenchError):
    """No run belongs to a sweep with this id or id prefix (the engine answers 404)."""


def sweep_table(run: RunDir) -> dict[str, Any] | None:
    """The run's ``[sweep]`` table when it belongs to a sweep (read without validation)."""
    try:
        table = tomllib.loads(run.config_path.read_text(encoding="utf-8")).get("sweep")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if isinstance(table, dict) and isinstance(table.get("id"), str) and table["id"]:
        return table
    return None


def _members(runs: list[RunDir]) -> dict[str, list[tuple[RunDir, dict[str, Any]]]]:
    out: dict[str, list[tuple[RunDir, dict[str, Any]]]] = {}
    for run in runs:
        table = sweep_table(run)
        if table is not None:
            out.setdefault(table["id"], []).append((run, table))
    return out


def resolve(sweep_id: str, runs: list[RunDir]) -> str:
    """The sweep id ``sweep_id`` names: exact, or a unique prefix."""
    ids = sorted(_members(runs))
    if sweep_id in ids:
        return sweep_id
    matches = [i for i in ids if sweep_id and i.startswith(sweep_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NoSuchSweep(f"no sweep {sweep_id!r}",
                          hint="list sweeps with `gemma-workbench sweep show`; start one with "
                               "`gemma-workbench sweep run CONFIG --grid key=v1,v2`")
    raise WorkbenchError(f"sweep id {sweep_id!r} is ambiguous ({', '.join(matches[:5])})",
                         hint="give more of the id")


def _wall_s(run: RunDir, status: dict[str, Any]) -> float | None:
    if isinstance(status.get("wall_s"), (int, float)):
        return float(status["wall_s"])
    started = ended = None
    for e in run.events():
        if e.get("kind") != "state" or not isinstance(e.get("time"), (int, float)):
            continue
        if e.get("state") == RunState.RUNNING and started is None:
            started = e["time"]
        if e.get("state") in TERMINAL_STATES:
            ended = e["time"]
    if started is None:
        return None
    end = ended if status.get("state") in TERMINAL_STATES and ended else time.time()
    return round(max(0.0, end - started), 3)


def _final_loss(run: RunDir, status: dict[str, Any]) -> float | None:
    if isinstance(status.get("final_eval_loss"), (int, float)):
        return float(status["final_eval_loss"])
    evals = [m for m in run.metrics() if "eval_loss" in m]
    return float(evals[-1]["eval_loss"]) if evals else None


def point_entry(run: RunDir, table: dict[str, Any], metric: str) -> dict[str, Any]:
    status = run.status()
    rows = records.read_rows(run)
    final = records.final_values(rows)
    value = final.get(metric)
    if value is None and metric == "loss":
        value = _final_loss(run, status)
    best_step = best_value = None
    if status.get("best_metric") == metric and isinstance(status.get("best_step"), int):
        best_step, best_value = status["best_step"], status.get("best_value")
    else:
        values = candidates(run, metric)  # eval.jsonl; for loss also metrics.jsonl's eval_loss
        steps = sorted(values)
        i = best_index(metric, [values[s] for s in steps])
        if i is not None:
            best_step, best_value = steps[i], values[steps[i]]
    point = table.get("point") if isinstance(table.get("point"), dict) else {}
    return {
        "point": point, "run_id": run.run_id, "state": str(status.get("state", "queued")),
        metric: value, "best_step": best_step, "best_value": best_value, "metrics": final,
        "wall_s": _wall_s(run, status), "peak_bytes": status.get("peak_bytes"),
        "trainable_params": status.get("trainable_params"), "step": status.get("step", 0),
        "total_steps": status.get("total_steps", 0), "dir": str(run.path),
    }


def _index(table: dict[str, Any]) -> int | None:
    """The point's place in its grid (1-based; None when unknown)."""
    from adapters_lib.sweeps.grid import expand

    grid, point = table.get("grid"), table.get("point")
    if isinstance(grid, dict) and grid and isinstance(point, dict):
        try:
            for p in expand({k: v for k, v in grid.items() if isinstance(v, list)}):
                if p.values == point:
                    return p.index
        except WorkbenchError:
            pass
    return None


def summary(runs: list[RunDir], sweep_id: str, metric: str = "") -> dict[str, Any]:
    """The sweep's results (see the module doc); ``sweep_id`` may be a unique prefix."""
    from adapters_lib.config import EVAL_METRICS
    from adapters_lib.config.checks import closest

    if metric and metric not in EVAL_METRICS:
        raise WorkbenchError(f"{metric!r} is not a metric", where="metric",
                             hint=f"{closest(metric, list(EVAL_METRICS))} (metrics are {', '.join(EVAL_METRICS)})")
    sid = resolve(sweep_id, runs)
    members = _members(runs)[sid]
    metric = metric or next((str(t.get("metric")) for _, t in members if t.get("metric")), "loss")
    members.sort(key=lambda m: (_index(m[1]) or 10**6, m[0].run_id))
    points = []
    for run, table in members:
        entry = point_entry(run, table, metric)
        entry["index"] = _index(table)
        points.append(entry)
    i = best_index(metric, [p[metric] for p in points])
    return {"sweep": sid, "metric": metric, "best": points[i] if i is not None else None,
            "points": points}


def list_sweeps(runs: list[RunDir]) -> list[dict[str, Any]]:
    """One line per sweep, newest first: id, metric, point count, runs per state."""
    out = []
    for sid, members in _members(runs).items():
        states: dict[str, int] = {}
        for run, _ in members:
            states[run.state] = states.get(run.state, 0) + 1
        metric = next((str(t.get("metric")) for _, t in members if t.get("metric")), "loss")
        out.append({"sweep": sid, "metric": metric, "points": len(members), "states": states})
    return sorted(out, key=lambda s: s["sweep"], reverse=True)
