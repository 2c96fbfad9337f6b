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
    """Evaluate a target string like "≥ 1.15×" or "≤ 0.6×" against a ratio."""
    if ratio is None or not target:
        return None
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
        "one process (alternating, after warm-up, median of ≥ 5 repetitions). Ratios, not absolute",
        "times, are the result: these machines are noisy. Regenerate with the command below.",
        "",
        f"- date: {meta.get('date')}",
        f"- machine: {meta.get('machine')}",
        f"- command: `{meta.get('command')}` ({meta.get('wall_s')} s)",
        "",
        "| measure | ours | reference | unit | ratio | target | met | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        met = {True: "yes", False: "**no**", None: "–"}[r.get("met")]
        ratio = f"{r['ratio']:.3g}×" if r.get("ratio") is not None else "–"
        ref = f"{f(r.get('reference'))} ({r.get('ref_name')})" if r.get("ref_name") else f(r.get("reference"))
        where = f"[{r['machine']}, {r.get('date')}] " if r.get("machine") else ""  # measured elsewhere
        lines.append(
            f"| {r['measure']} | {f(r.get('ours'))} | {ref} | {r.get('unit', '')} | {ratio} | "
            f"{r.get('target', '')} | {met} | {where}{r.get('note', '')} |"
        )
    lines.append("")
    analysis = Path(__file__).with_name("analysis.md")
    if analysis.is_file():  # the hand-written reading of the numbers, kept across regenerations
        lines += ["", analysis.read_text().rstrip(), ""]
    return "\n".join(lines) + "\n"
