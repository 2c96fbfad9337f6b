"""The Configure screen's readings of engine replies: devices from the status, the estimate
route's reply flattened for the memory-fit bar, the data report as a few lines of markup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.markup import escape


def device_info(status: Mapping[str, Any]) -> tuple[int, str]:
    """(device count, kind) from the engine status: its ``devices`` and their ``kind``."""
    devices = list(status.get("devices") or [])
    kind = str(devices[0]["kind"] or devices[0]["platform"]) if devices else ""
    return len(devices), kind


def problem_text(p: Any) -> str:
    if isinstance(p, Mapping):
        hint = f" — {p['hint']}" if p.get("hint") else ""
        return f"{p.get('message', p)}{hint}"
    return str(p)


def estimate_view(reply: dict[str, Any]) -> dict[str, Any]:
    """Flatten the estimate route's reply (``{"estimate": {...}, "mesh_problems": [...]}``)."""
    est = {**(reply.get("estimate") or {}), **{k: v for k, v in reply.items() if k != "estimate"}}
    raw = reply.get("mesh_problems") or est.get("problems") or []
    est["problems"] = [problem_text(p) for p in raw]
    est["errors"] = [problem_text(p) for p in raw
                     if isinstance(p, Mapping) and p.get("level") == "error"]
    return est


def issue_text(issue: Any) -> str:
    if isinstance(issue, Mapping):
        where = f"{issue['where']}: " if issue.get("where") else ""
        return f"{where}{issue.get('message', issue)}"
    return str(issue)


def data_report_text(report: dict[str, Any]) -> str:
    """The data area's report (``Report.to_dict``) as a few lines of markup."""
    ok = report.get("ok", not report.get("fatal"))
    lines = ["[b green]✓ data looks good[/]" if ok else
             f"[b red]✗ {report.get('fatal') or 'data has problems'}[/]"]
    counts = [f"{key.replace('_', ' ')} {report[key]}" for key in
              ("format", "records", "examples", "dropped", "sequences", "tokens", "truncated",
               "mean_tokens", "max_tokens") if report.get(key) not in (None, "", [], {})]
    if counts:
        lines.append("  " + " · ".join(counts))
    for severity, style in (("errors", "red"), ("warnings", "yellow")):
        issues = report.get(severity) or []
        for issue in issues[:5]:
            lines.append(f"  [{style}]⚠ {escape(issue_text(issue))}[/]")
        more = int(report.get(f"{severity[:-1]}_count", len(issues)) or 0) - min(len(issues), 5)
        if more > 0:
            lines.append(f"  [{style}]… {more} more {severity}[/]")
    preview = report.get("preview") or []
    if preview:
        lines.append("[b]preview[/b] (as the model sees it)")
        for ex in preview[:3]:
            text = ex if isinstance(ex, str) else ex.get("text") or str(ex)
            lines.append("  " + escape(text.replace("\n", "⏎ ")[:400]))
    return "\n".join(lines)


