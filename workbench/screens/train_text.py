"""The Train screen's words: the header (state, step, losses, step time, ETA, or what the run
waits for), device memory against capacity, and the checkpoints so far.

Pure functions of a ``RunView`` and an engine ``status`` reply (``api.EngineStatus``), tested without a terminal.
"""

from __future__ import annotations

import time

from rich.markup import escape

from adapters_lib.engine import api
from adapters_lib.runs.state import RunState
from workbench.screens.runstate import RunView, epoch, fmt_duration
from workbench.widgets.memory_fit import gib

BAR_W = 10
SHOWN_CKPTS = 5


def waiting_for(view: RunView, now: float | None = None) -> str:
    """Until the first step: since when and what the run waits for (``"12s compiling the
    first step"``): the time first, as at 80 columns the header's end is cut."""
    now = time.time() if now is None else now
    since = None
    phases = (RunState.STOPPING,) if view.state == RunState.STOPPING else (RunState.QUEUED, RunState.RUNNING)
    for e in view.events:
        if e.get("kind") == "state" and e.get("state") in phases:
            since = epoch(e.get("time")) or since
    if view.state == RunState.QUEUED:
        what = "queued for the device"
    elif view.state == RunState.STOPPING:
        what = "stopping: writing a checkpoint"
    elif view.compiling() is not None:
        what = f"compiling the {view.compiling()[0]}"
    elif any(e.get("kind") == "log" and str(e.get("message", "")).startswith("set-up")
             for e in view.events):
        what = "compiling the first step"
    elif any(e.get("kind") == "log" and str(e.get("message", "")).startswith("GPTQ")
             for e in view.events):  # models.quantize.quantize_gptq.PROGRESS (no engine import here)
        what = "GPTQ: rounding the base"
    else:
        what = "setting up model, data, mesh"
    took = f"{fmt_duration(max(0.0, now - since))} " if since is not None else ""
    return f"{took}{what}"


def header_text(view: RunView, name: str, state_style: str, now: float | None = None) -> str:
    """One line, the most telling first (at 80 columns its end is cut): the run, its state and
    step, what it waits for or its ETA, then the losses and the step time."""
    v = view
    parts = [f"[b]{escape(name)}[/b] [{state_style}]{v.state or 'unknown'}[/] {v.step}/{v.total_steps or '?'}"]
    compiling = v.compiling() if v.metrics else None
    if v.active and (not v.metrics or v.state == RunState.STOPPING):
        parts.append(f"[yellow]{escape(waiting_for(v, now))}[/]")
    elif compiling is not None:  # mid-run: what the run waits for, not a speed
        parts.append(f"[yellow]{escape(compiling_text(compiling, now))}[/]")
    eta = None if compiling is not None else v.eta_seconds()
    if eta is not None:
        parts.append(f"ETA {fmt_duration(eta)}")
    last = v.metrics[-1] if v.metrics else {}
    if isinstance(last.get("loss"), (int, float)):
        parts.append(f"loss {last['loss']:.3f}")
    evals = [m for m in v.metrics if isinstance(m.get("eval_loss"), (int, float))]
    if evals:
        parts.append(f"[b magenta]eval {evals[-1]['eval_loss']:.3f}[/]@{evals[-1].get('step')}")
    per_step = None if compiling is not None else v.step_time()
    if per_step is not None:
        # a small model on an accelerator steps in milliseconds: "0.00s/step" said nothing
        parts.append(f"{per_step:.2f}s/step" if per_step >= 0.1 else f"{per_step * 1000:.3g}ms/step")
    text = " ".join(parts)
    return text + (f" [red]{escape(v.error)}[/]" if v.error else "")


def compiling_text(compiling: tuple[str, float | None], now: float | None = None) -> str:
    """``compiling the train step (12 s)`` (``RunView.compiling``)."""
    program, since = compiling
    now = time.time() if now is None else now
    took = f" ({max(0.0, now - since):.0f} s)" if since is not None else ""
    return f"compiling the {program}{took}"


def bar(fraction: float, width: int = BAR_W) -> str:
    filled = max(0, min(width, round(width * fraction)))
    style = "green" if fraction < 0.85 else "yellow" if fraction <= 1 else "red"
    return f"[{style}]{'█' * filled}[/][dim]{'░' * (width - filled)}[/]"


def memory_text(status: api.EngineStatus | None) -> str:
    """Device memory in use against capacity (the engine's live figures); on devices that
    report none (CPU), the engine process against the host's memory."""
    if status is None:
        return "[dim]memory: waiting for the engine[/]"
    known = [d for d in status.devices
             if d.bytes_in_use is not None and d.memory_bytes is not None and d.memory_bytes > 0]
    if known:
        worst = max(known, key=lambda d: d.bytes_in_use / d.memory_bytes)
        frac = worst.bytes_in_use / worst.memory_bytes
        kind = escape(worst.kind or "device")
        if len(known) == 1:
            return (f"mem {kind}:{worst.id} {bar(frac)} {gib(worst.bytes_in_use)} / "
                    f"{gib(worst.memory_bytes)} ({frac:.0%})")
        low = min(d.bytes_in_use for d in known)
        return (f"mem {len(known)}×{kind} {bar(frac)} max {gib(worst.bytes_in_use)} / "
                f"{gib(worst.memory_bytes)} ({frac:.0%}) on #{worst.id} · min {gib(low)}")
    rss, total = status.memory.engine_rss_bytes, status.memory.host_bytes
    if rss is not None and total:
        return (f"mem host {bar(rss / total)} engine {gib(rss)} / {gib(total)} "
                "[dim](no per-device figures here)[/]")
    return "[dim]memory: —[/]"


def checkpoints_text(steps: list[int]) -> str:
    if not steps:
        return "[dim]no checkpoint yet[/]"
    shown = " ".join(str(s) for s in steps[-SHOWN_CKPTS:])
    more = "… " if len(steps) > SHOWN_CKPTS else ""
    return f"ckpts ({len(steps)}) {more}{shown}"
