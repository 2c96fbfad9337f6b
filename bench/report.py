"""Rows of results and the BENCHMARKS.md table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Row:
    measure: str
    ours: float | None = None
    reference: float | None = None
    unit: str = ""
    target: str = ""
    """e.g. "≥ 1.15×" (ratio ours/reference), "≤ 0.6×", "≤ 1.0 s"."""
    ratio: float | None = None
    met: bool | None = None
    ref_name: str = ""
    note: str = ""
    seconds: float | None = None
    run_command: str = ""
    """The command that measured this row (``python -m bench … --only NAME``)."""
    run_date: str = ""
    run_load: float | None = None
    """The machine's 1-minute load average when this row's measure started (shared machines)."""

    def __post_init__(self):
        if self.ratio is None and self.ours is not None and self.reference:
            self.ratio = self.ours / self.reference

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        def f(x):
            return "-" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))
        status = {True: "met", False: "MISSED", None: ""}[self.met]
        return (f"{self.measure}: ours {f(self.ours)} {self.unit} vs {self.ref_name} {f(self.reference)}"
                f" → {f(self.ratio)}× (target {self.target}) {status} {self.note}")


def check(ratio: float | None, target: str) -> bool | None:
    """Evaluate a target string like "≥ 1.15×", "≤ 0.6×" or "within 3 %" (both ways of 1×)
    against a ratio."""
    if ratio is None or not target:
        return None
    if target.startswith("within "):
        return abs(ratio - 1.0) <= float(target.split()[1]) / 100
    op, _, value = target.partition(" ")
    bound = float(value.rstrip("×s ").strip())
    return ratio >= bound if op == "≥" else ratio <= bound


def median_alternating(fns: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Run each fn ``reps`` times, alternating, and return the median of each."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            samples[k].append(fn())
    return {k: statistics.median(v) for k, v in samples.items()}


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _provenance(r: dict, meta: dict) -> str:
    command = r.get("run_command") or r.get("command") or meta.get("command", "")
    date = r.get("run_date") or r.get("date") or meta.get("date", "")
    load = r.get("run_load")
    return f"`{command}` ({date}" + (f", load {load:.1f})" if load is not None else ")")


def render_markdown(meta: dict, results: dict[str, dict]) -> str:
    def f(x, digits=4):
        if x is None:
            return "–"
        if isinstance(x, float):
            return f"{x:.{digits}g}"
        return str(x)

    lines = [
        "# Benchmarks",
        "",
        "Ours against the reference implementations in `bench/refs.py`, measured side by side in",
        "one process (alternating, after warm-up, the median of the repetitions each row's note",
        "gives). Ratios, not absolute times, are the result: these machines are noisy. The last",
        "run is below; each row's own command (last column) re-measures it.",
        "",
        f"- date: {meta.get('date')}",
        f"- machine: {meta.get('machine')}",
        f"- command: `{meta.get('command')}` ({meta.get('wall_s')} s)",
        "",
        "Each row names the command that measured it, its date and the 1-minute load average when",
        "it started (2 cores shared: a load above 2 means the cores were contended).",
        "",
        "| measure | ours | reference | unit | ratio | target | met | notes | measured by (date, load) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        met = {True: "yes", False: "**no**", None: "–"}[r.get("met")]
        ratio = f"{r['ratio']:.3g}×" if r.get("ratio") is not None else "–"
        ref = f"{f(r.get('reference'))} ({r.get('ref_name')})" if r.get("ref_name") else f(r.get("reference"))
        where = f"[{r['machine']}, {r.get('date')}] " if r.get("machine") else ""  # measured elsewhere
        lines.append(
            f"| {r['measure']} | {f(r.get('ours'))} | {ref} | {r.get('unit', '')} | {ratio} | "
            f"{r.get('target', '')} | {met} | {where}{r.get('note', '')} | {_provenance(r, meta)} |"
        )
    lines.append("")
    analysis = Path(__file__).with_name("analysis.md")
    if analysis.is_file():  # the hand-written reading of the numbers, kept across regenerations
        lines += ["", analysis.read_text().rstrip(), ""]
    return "\n".join(lines) + "\n"
