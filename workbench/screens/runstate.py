"""What the Train, Compare and Runs screens know about one run, built from engine replies.

``RunView`` folds the run record (``get_run``: an ``api.RunDetail``) and the live stream
(``stream_run``'s ``api.StreamItem``s) into plain lists: metrics by step (open records of
numbers), events, state. It is UI-free so the folding is tested without a terminal; a run
just created has no metrics yet.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adapters_lib.engine import api
from adapters_lib.runs.state import ACTIVE_STATES, STATES, RunState


@dataclass
class RunView:
    run_id: str
    state: RunState | None = None
    """None until the engine has said."""
    step: int = 0
    total_steps: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    error: str = ""
    best_step: int | None = None
    """The step the run pinned as its best (``status.json`` ``best_step``, evals' selection)."""
    _seen_events: set[str] = field(default_factory=set, repr=False)

    def add_event(self, e: dict[str, Any]) -> bool:
        """Append an event unless already seen (the stream replays what get_run gave)."""
        key = json.dumps(e, sort_keys=True, default=str)
        if key in self._seen_events:
            return False
        self._seen_events.add(key)
        self.events.append(e)
        return True

    @property
    def last_step(self) -> int:
        return int(self.metrics[-1].get("step", 0)) if self.metrics else 0

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def apply_status(self, status: api.RunSummary) -> None:
        """Fold a run's status in (``list_runs``, ``stop_run``, a stream's ``status`` item)."""
        self.state = status.state
        self.step = status.step
        self.total_steps = status.total_steps or self.total_steps
        if status.error is not None and status.error.message:
            self.error = status.error.message
        if status.best_step is not None:
            self.best_step = status.best_step

    def apply_record(self, record: api.RunDetail) -> None:
        """Fold a ``get_run`` record in: the status, the config, metrics, events, checkpoints."""
        self.apply_status(record)
        if record.config is not None:
            self.config = record.config
        if not self.total_steps:
            self.total_steps = int(self.config.get("train", {}).get("steps", 0) or 0)
        for m in record.metrics or []:
            self.add_metrics(m)
        for e in record.events or []:
            self.add_event(e)
        if record.checkpoints:
            self.checkpoints = sorted(record.checkpoints)

    def add_metrics(self, m: dict[str, Any]) -> None:
        step = int(m.get("step", 0) or 0)
        if self.metrics and step <= self.last_step:
            if step == self.last_step:  # an eval line for the same step: merge it
                self.metrics[-1] = {**self.metrics[-1], **m}
            return
        self.metrics.append(dict(m))
        self.step = max(self.step, step)

    def apply_stream(self, item: api.StreamItem) -> str:
        """Fold one run-stream item in (``api.RUN_STREAM_ITEMS``); returns its type."""
        data = item.data
        if item.type == "metrics":
            self.add_metrics(data)
        elif item.type == "status":
            self.apply_status(data)
        elif item.type == "error":
            self.error = data.message
        elif item.type == "log":
            self.add_event({"kind": "log", **data.to_json()})
            return "event"
        elif item.type == "end":
            if data.state is not None:
                self.state = data.state
        elif item.type == "event":
            self.apply_event(data)
        return item.type

    def apply_event(self, e: dict[str, Any]) -> None:
        """An ``events.jsonl`` record: a checkpoint joins the list, a state event moves the state."""
        if not self.add_event(e):
            return
        step = e.get("step")
        if e.get("kind") == "checkpoint" and isinstance(step, int) and step not in self.checkpoints:
            self.checkpoints = sorted([*self.checkpoints, step])
        if e.get("kind") == "state" and e.get("state") in STATES:
            self.state = RunState(e["state"])

    def series(self, key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        pts = [(m["step"], m[key]) for m in self.metrics
               if m.get(key) is not None and m.get("step") is not None]
        return tuple(p[0] for p in pts), tuple(p[1] for p in pts)

    def compiling(self) -> tuple[str, float | None] | None:
        """The program the run compiles in the foreground now, and since when (epoch seconds):
        the newest ``compile`` event of a program, when it says "compiling"; else None."""
        last: dict[str, dict[str, Any]] = {}
        for e in self.events:
            if e.get("kind") == "compile":
                last[str(e.get("program", ""))] = e
        if not self.active:
            return None
        for program, e in last.items():
            if e.get("state") == "compiling":
                return program, epoch(e.get("time"))
        return None

    def speed_series(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Tokens/s by step, without the steps that compiled (``compile_s``): a compile is not a speed."""
        pts = [(m["step"], m["tokens_per_s"]) for m in self.metrics
               if m.get("tokens_per_s") is not None and m.get("step") is not None and not m.get("compile_s")]
        return tuple(p[0] for p in pts), tuple(p[1] for p in pts)

    def step_time(self) -> float | None:
        """Seconds a step takes now: the median of the last 20 steps, without step 1 and the
        steps that compiled (``compile_s``: 130 s against 2 s; until then there is no figure)."""
        times = sorted([float(m["step_time_s"]) for m in self.metrics[-21:]
                        if isinstance(m.get("step_time_s"), (int, float)) and m["step_time_s"] > 0
                        and m.get("step") != 1 and not m.get("compile_s")][-20:])
        if not times:
            return None
        mid = len(times) // 2
        return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2

    def eta_seconds(self) -> float | None:
        per_step = self.step_time()
        if per_step is None or not self.total_steps or not self.active:
            return None
        return max(0.0, (self.total_steps - self.step) * per_step)


def epoch(t: Any) -> float | None:
    """An event time (epoch seconds or an ISO string) as epoch seconds."""
    if isinstance(t, (int, float)):
        return float(t)
    try:
        return datetime.fromisoformat(str(t).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def clock(t: Any) -> str:
    """HH:MM:SS of an event time (epoch seconds, local time; or an ISO string)."""
    if isinstance(t, (int, float)):
        return time.strftime("%H:%M:%S", time.localtime(t))
    t = str(t or "")
    return t[11:19] if len(t) >= 19 and t[10] in "T " else ""


def event_line(e: dict[str, Any]) -> str:
    kind = str(e.get("kind", e.get("type", "event")))
    rest = {k: v for k, v in e.items() if k not in ("time", "kind", "type")}
    message = str(rest.pop("message", "") or "")
    if kind == "state":
        state = rest.pop("state", "?")
        head = f"{state} at step {rest['step']}" if "step" in rest else str(state)
        body = f"{head} {message}".strip()
    elif kind == "log":
        body = f"{rest.get('level', '')} {message}".strip()
    else:
        details = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in list(rest.items())[:5])
        body = f"{kind}: {message or details}"
    return f"{clock(e.get('time'))} {body}".strip()
