"""A sweep's results as text: ``sweep show SWEEP`` (and the points ranked, for the TUI).

``ranked(results)`` orders the points best first by the sweep's metric (its direction: loss
and perplexity lower, the others higher); points without a value go last, in grid order.
"""

from __future__ import annotations

import math
from typing import Any

from adapters_lib.engine import api

LOWER_IS_BETTER = ("loss", "perplexity")


def _value(point: api.SweepPoint, metric: str) -> float | None:
    v = point.value(metric)
    return v if v is not None and math.isfinite(v) else None


def ranked(results: api.SweepResults) -> list[api.SweepPoint]:
    sign = 1.0 if results.metric in LOWER_IS_BETTER else -1.0

    def key(p: api.SweepPoint) -> tuple[bool, float, int]:
        v = _value(p, results.metric)
        return (v is None, sign * v if v is not None else 0.0, p.index or 10**6)

    return sorted(results.points, key=key)


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _count(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _num(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    return f"{v:.4f}" if abs(v) < 1000 else f"{v:.1f}"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return " ".join(map(str, v))
    return str(v)


def render_sweep(results: api.SweepResults) -> str:
    metric = results.metric
    points = ranked(results)
    best = results.best.run_id if results.best is not None else None
    keys: list[str] = []
    for p in points:
        keys += [k for k in p.point if k not in keys]
    others: list[str] = []
    for p in points:
        others += [k for k in p.metrics if k != metric and k not in others]
    head = ["", *keys, "state", metric, "best step", *others, "wall", "peak mem", "trainable", "run"]
    rows = []
    for p in points:
        rows.append(["*" if p.run_id == best else "", *[_cell(p.point.get(k, "-")) for k in keys],
                     p.state, _num(_value(p, metric)),
                     str(p.best_step) if p.best_step is not None else "-",
                     *[_num(p.metrics.get(k)) for k in others],
                     f"{p.wall_s:.0f} s" if p.wall_s is not None else "-",
                     _bytes(p.peak_bytes), _count(p.trainable_params), p.run_id or "-"])
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"sweep {results.sweep}: {len(points)} points, ranked by {metric} "
             f"({'lower' if metric in LOWER_IS_BETTER else 'higher'} is better)"]
    for r in [head, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if results.best is not None:
        point = " ".join(f"{k}={_cell(v)}" for k, v in results.best.point.items())
        lines.append(f"best: {best} ({point})")
    else:
        lines.append("best: none yet (no point has a value of the metric)")
    return "\n".join(lines)


def render_sweeps(sweeps: list[api.SweepInfo]) -> str:
    if not sweeps:
        return "no sweeps yet (start one with `gemma-workbench sweep run CONFIG --grid key=v1,v2`)"
    width = max(len(s.sweep) for s in sweeps)
    lines = [f"{'SWEEP':<{width}}  {'POINTS':>6}  {'METRIC':<13}  STATES"]
    for s in sweeps:
        states = ", ".join(f"{n} {k}" for k, n in sorted(s.states.items()))
        lines.append(f"{s.sweep:<{width}}  {s.points:>6}  {s.metric:<13}  {states}")
    return "\n".join(lines)
