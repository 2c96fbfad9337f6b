"""``eval.jsonl`` in a run directory (contract): one row per step and metric set.

::

    {"step": 0,   "phase": "base",  "loss": 2.31, "perplexity": 10.1, "exact_match": 0.05}
    {"step": 50,  "phase": "tuned", "loss": 1.02, "perplexity": 2.77, "exact_match": 0.40}
    {"step": 100, "phase": "tuned", "loss": 0.88, "perplexity": 2.41, "exact_match": 0.55}

``phase`` is ``"base"`` (the model before training: the base weights, or the fresh adapters,
which change nothing) or ``"tuned"`` (the trained model at ``step``). A row holds only
``step``, ``phase`` and metric values; a metric that could not be computed is left out.
Rows are appended as the run goes; a resumed run drops the tuned rows past its checkpoint.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from adapters_lib.runs import RunDir, append_jsonl, read_jsonl

EVAL_FILE = "eval.jsonl"
PHASES = ("base", "tuned")


def _run(run: RunDir | str | Path) -> RunDir:
    return run if isinstance(run, RunDir) else RunDir(Path(run))


def eval_path(run: RunDir | str | Path) -> Path:
    return _run(run).path / EVAL_FILE


def make_row(step: int, phase: str, values: dict[str, Any]) -> dict[str, Any]:
    """The row for ``values`` (finite numbers only) at ``step`` in ``phase``."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    row: dict[str, Any] = {"step": int(step), "phase": phase}
    for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            row[name] = float(value)
    return row


def append_row(run: RunDir | str | Path, step: int, phase: str, values: dict[str, Any]) -> dict[str, Any]:
    row = make_row(step, phase, values)
    append_jsonl(eval_path(run), row)
    return row


def read_rows(run: RunDir | str | Path, phase: str | None = None) -> list[dict[str, Any]]:
    """The rows (a torn last line skipped), all or those of ``phase``."""
    rows = [r for r in read_jsonl(eval_path(run))
            if isinstance(r.get("step"), int) and r.get("phase") in PHASES]
    return rows if phase is None else [r for r in rows if r["phase"] == phase]


def truncate_after(run: RunDir | str | Path, step: int) -> None:
    """Drop the tuned rows past ``step`` (a resume re-runs them); base rows stay."""
    path = eval_path(run)
    if not path.exists():
        return
    rows = read_rows(run)
    kept = [r for r in rows if r["phase"] == "base" or r["step"] <= step]
    if len(kept) == len(rows):
        return
    import json

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    os.replace(tmp, path)


def final_values(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The metrics of the last tuned row (the end of the run), {} when none."""
    tuned = [r for r in rows if r["phase"] == "tuned"]
    if not tuned:
        return {}
    last = max(tuned, key=lambda r: r["step"])
    return {k: v for k, v in last.items() if k not in ("step", "phase")}


def base_values(rows: list[dict[str, Any]]) -> dict[str, float]:
    base = [r for r in rows if r["phase"] == "base"]
    return {k: v for k, v in base[-1].items() if k not in ("step", "phase")} if base else {}
