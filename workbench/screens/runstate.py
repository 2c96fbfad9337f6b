"""What the Train, Compare and Runs screens know about one run, built from engine replies.

``RunView`` folds the run record (``get_run``) and the live stream (``stream_run`` events)
into plain lists: metrics by step, events, state. It is UI-free so the folding is tested
without a terminal, and tolerant of missing keys (a run just created has no metrics yet).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

ACTIVE = ("queued", "running", "stopping")


@dataclass
class RunView:
    run_id: str
    state: str = "unknown"
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
        return self.state in ACTIVE

    def apply_record(self, record: dict[str, Any]) -> None:
        """Fold a ``get_run`` / ``list_runs`` record in."""
        status = record.get("status") if isinstance(record.get("status"), dict) else record
        self.state = str(status.get("state", self.state))
        self.step = int(status.get("step", self.step) or 0)
        self.total_steps = int(status.get("total_steps", self.total_steps) or 0)
        err = status.get("error")
        if err:
            self.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
        if isinstance(record.get("config"), dict):
            self.config = record["config"]
        if not self.total_steps:
            self.total_steps = int(self.config.get("train", {}).get("steps", 0) or 0)
        for m in record.get("metrics") or []:
            self.add_metrics(m)
        for e in record.get("events") or []:
            self.add_event(e)
        best = status.get("best_step", record.get("best_step"))
        if isinstance(best, int) and not isinstance(best, bool):
            self.best_step = best
        ckpts = record.get("checkpoints")
        if isinstance(ckpts, list):
            self.checkpoints = sorted(int(c.get("step", c) if isinstance(c, dict) else c)
                                      for c in ckpts)

    def add_metrics(self, m: dict[str, Any]) -> None:
        step = int(m.get("step", 0) or 0)
        if self.metrics and step <= self.last_step:
            if step == self.last_step:  # an eval line for the same step: merge it
                self.metrics[-1] = {**self.metrics[-1], **m}
            return
        self.metrics.append(dict(m))
        self.step = max(self.step, step)

    def apply_stream(self, ev: dict[str, Any]) -> str:
        """Fold one stream event in; returns its kind (metrics, event, status, end)."""
        kind = str(ev.get("type") or ev.get("event") or "")
        data = ev.get("data") if isinstance(ev.get("data"), dict) else ev
        if kind == "metrics" or (not kind and "loss" in data):
            self.add_metrics(data)
            return "metrics"
        if kind in ("status", "state") or (not kind and "state" in data and "kind" not in data):
            self.apply_record(data)
            return "status"
        if kind in ("replayed", "ping"):
            return kind
        if kind == "error":
            self.error = str(data.get("message", data))
            return "error"
        if kind == "log":
            self.add_event({"kind": "log", **data})
            return "event"
        if kind in ("end", "done", "closed"):
            if data.get("state"):
                self.state = str(data["state"])
            return "end"
        if self.add_event(data) and data.get("kind") == "checkpoint" and \
                isinstance(data.get("step"), int) and data["step"] not in self.checkpoints:
            self.checkpoints = sorted([*self.checkpoints, data["step"]])
        if data.get("kind") in ("state", "status") and data.get("state"):
            self.state = str(data["state"])
        return "event"

    def series(self, key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        pts = [(m["step"], m[key]) for m in self.metrics
               if m.get(key) is not None and m.get("step") is not None]
        return tuple(p[0] for p in pts), tuple(p[1] for p in pts)

    def step_time(self) -> float | None:
        """Seconds a step takes now: the median of the last 20 steps, without step 1 (it
        compiles: 130 s against 2 s; until step 2 there is no figure)."""
        times = sorted([float(m["step_time_s"]) for m in self.metrics[-21:]
                        if isinstance(m.get("step_time_s"), (int, float)) and m["step_time_s"] > 0
                        and m.get("step") != 1][-20:])
        if not times:
            return None
        mid = len(times) // 2
        return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2

    def eta_seconds(self) -> float | None:
        per_step = self.step_time()
        if per_step is None or not self.total_steps or not self.active:
            return None
        return max(0.0, (self.total_steps - self.step) * per_step)


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
