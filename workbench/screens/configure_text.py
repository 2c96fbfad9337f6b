"""The Configure screen's readings of engine replies: devices from the status, the estimate's
problems in words, the data report as a few lines of markup."""

from __future__ import annotations

from rich.markup import escape

from adapters_lib.engine import api


def device_info(status: api.EngineStatus) -> tuple[int, str]:
    """(device count, kind) from the engine status: its ``devices`` and their ``kind``."""
    devices = status.devices
    return len(devices), (devices[0].kind or devices[0].platform) if devices else ""


def problem_text(p: api.MeshProblem) -> str:
    text = f"{p.where}: {p.message}" if p.where else p.message
    return f"{text} — {p.hint}" if p.hint else text


def estimate_problems(reply: api.EstimateReply, *, errors_only: bool = False) -> list[str]:
    """The estimate's mesh problems in words (``errors_only``: those that stop a launch)."""
    return [problem_text(p) for p in reply.mesh_problems if not errors_only or p.level == "error"]


def data_report_text(report: api.DataReport) -> str:
    """The data area's report as a few lines of markup."""
    lines = ["[b green]✓ data looks good[/]" if report.ok else
             f"[b red]✗ {report.fatal or 'data has problems'}[/]"]
    counts = [f"{key.replace('_', ' ')} {value}" for key, value in (
        ("format", report.format), ("records", report.records), ("examples", report.examples),
        ("dropped", report.dropped), ("sequences", report.sequences), ("tokens", report.tokens),
        ("truncated", report.truncated), ("mean_tokens", report.mean_tokens),
        ("max_tokens", report.max_tokens)) if value not in (None, "")]
    if counts:
        lines.append("  " + " · ".join(counts))
    for severity, issues, count, style in (("errors", report.errors, report.error_count, "red"),
                                           ("warnings", report.warnings, report.warning_count,
                                            "yellow")):
        for issue in issues[:5]:
            lines.append(f"  [{style}]⚠ {escape(issue.text or issue.message)}[/]")
        more = max(count, len(issues)) - min(len(issues), 5)
        if more > 0:
            lines.append(f"  [{style}]… {more} more {severity}[/]")
    if report.preview:
        lines.append("[b]preview[/b] (as the model sees it)")
        for ex in report.preview[:3]:
            lines.append("  " + escape(ex.text.replace("\n", "⏎ ")[:400]))
    return "\n".join(lines)
