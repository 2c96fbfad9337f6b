"""Configure's line about the next run's programs: ready / compiling (n s) / queued.

``readiness_text`` is a pure function of the engine's replies (``api.CompileAheadReply`` at the
request, then ``api.CompileJobs``), tested without a terminal; ``ProgramReadiness`` shows it.
Jobs of the same program (one eval step per eval batch shape) are shown as one, at the state
the launch would wait for (compiling before queued before failed before ready).
"""

from __future__ import annotations

from rich.markup import escape
from textual.widgets import Static

from adapters_lib.engine import api

ORDER = ("compiling", "queued", "failed", "dropped", "ready")
STYLE = {"ready": "green", "compiling": "yellow", "queued": "dim", "failed": "red", "dropped": "dim"}
LIVE = ("queued", "compiling")


def settled(jobs: api.CompileJobs | None) -> bool:
    """Whether nothing of the latest request moves any more (polling may stop)."""
    if jobs is None or jobs.latest is None:
        return jobs is not None
    if jobs.latest.state in ("deferred", "planning"):
        return False
    return not any(j.state in LIVE for j in jobs.jobs)


def readiness_text(jobs: api.CompileJobs | None, *, message: str = "") -> str:
    """``programs: train step ready · eval step compiling (12 s)``, or why there is none."""
    if jobs is None:
        return f"[dim]programs: {escape(message)}[/]" if message else ""
    if not jobs.ahead and jobs.latest is None:
        return f"[dim]{escape(jobs.message or 'the programs compile at launch')}[/]"
    latest = jobs.latest
    if latest is None:
        return "[dim]programs: not compiled ahead yet[/]"
    if latest.state == "deferred":
        return "[dim]programs: compiled ahead when the running run ends[/]"
    if latest.state == "planning":
        return "[dim]programs: setting up the model and data to compile them…[/]"
    if latest.state == "failed":
        return f"[red]programs: not compiled ahead: {escape(latest.message)}[/]"
    mine = [j for j in jobs.jobs if j.request == latest.request]
    if not mine:
        return "[dim]programs: compiled at launch (nothing to compile ahead)[/]"
    parts = []
    for what in dict.fromkeys(j.what for j in mine):
        same = [j for j in mine if j.what == what]
        job = min(same, key=lambda j: ORDER.index(j.state) if j.state in ORDER else len(ORDER))
        state = job.state
        if state == "compiling" and job.seconds is not None:
            state = f"compiling ({job.seconds:.0f} s)"
        parts.append(f"{escape(what)} [{STYLE.get(job.state, 'dim')}]{state}[/]")
    return "programs: " + " · ".join(parts)


class ProgramReadiness(Static):
    """One line: the next run's programs and their states."""

    DEFAULT_CLASSES = "readiness"
