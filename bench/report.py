"""Rows of results, and BENCHMARKS.md's generated tables (one an area) and notes."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


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


AREAS: dict[str, tuple[str, tuple[str, ...]]] = {
    # area key -> (its table's title, the measures (``--only`` names) whose rows it holds);
    # a measure named nowhere goes to "cpu"
    "cpu": ("CPU against the references", (
        "train_random", "train_gsm8k", "ab_pair", "real_270m_train", "real_270m_gsm8k", "real_270m_gsm8k_bf16",
        "real_270m_ab", "real_270m_attention", "real_270m_load", "catalog_scan", "ui_start", "ui_overhead")),
    "loop": ("The interactive loop on the CPU", ("loop_demo", "loop_270m")),
    "decode": ("Decode", ("decode_270m",)),
    "memory": ("Memory", ("memory_270m", "real_270m_memory", "memory_estimate", "memory_fit")),
    "quantization": ("Quantization", (
        "quantized_270m_memory", "quantized_270m_ppl", "quantized_270m_lora", "quantized_270m_lora_text",
        "quantized_270m_ab")),
    "routes": ("The two routes", ("keras_train",)),
    "gpu": ("On a GPU", ("gpu_mfu",)),  # and rows merged from a GPU machine (``--merge``)
}
NOTE_CHARS = 120
"""A table note's most characters; the whole note is in the notes file the row links to."""


def measure_name(r: dict) -> str:
    """The ``--only`` name that measured a row (its detail's anchor in the notes file); rows
    merged from another machine: ``gpu``."""
    command = r.get("run_command") or r.get("command") or ""
    words = command.split()
    if "--only" in words and words.index("--only") + 1 < len(words):
        return words[words.index("--only") + 1]
    return "gpu" if r.get("machine") else "cpu"


def area_of(r: dict) -> str:
    name = measure_name(r)
    return next((key for key, (_, names) in AREAS.items() if name in names),
                "gpu" if "gpu" in (r.get("machine") or "") else "cpu")


def clean(text: str) -> str:
    """A note without the tracker's references ("(#NN)") that older rows carry."""
    return re.sub(r"\s*\(#\d+(\.\d+)?\)|#\d+(\.\d+)?:?\s*", "", text or "").strip()


def short_note(note: str, limit: int = NOTE_CHARS) -> str:
    """The note's leading clauses (split at "; ") that fit ``limit`` characters, "…" when cut."""
    note = clean(note)
    if len(note) <= limit:
        return note
    out = ""
    for clause in note.split("; "):
        joined = f"{out}; {clause}" if out else clause
        if len(joined) > limit - 1:
            break
        out = joined
    if not out:  # the first clause alone is too long: cut at a word
        out = note[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:(")
    return out + "…"


def _when(r: dict, meta: dict) -> str:
    date = (r.get("run_date") or r.get("date") or meta.get("date", "")).removesuffix(" UTC")
    load = r.get("run_load")
    machine = (r.get("machine") or "").split(", ")[-1]  # "x86_64 16 cores, gpu:NVIDIA H200×1": the device
    where = f"{machine}, " if machine and not machine.startswith("cpu:") else ""
    return where + date + (f", load {load:.1f}" if load is not None else "")


def _commands(rows: list[dict], meta: dict) -> str:
    names = list(dict.fromkeys(measure_name(r) for r in rows))
    if any(r.get("machine") for r in rows):
        return ", ".join(dict.fromkeys(f"`{r.get('command') or r.get('run_command')}`" for r in rows))
    quick = all("--quick" in (r.get("run_command") or meta.get("command", "")) for r in rows)
    return f"`python -m bench{' --quick' if quick else ''} --only {' '.join(names)}`"


def render_table(rows: list[dict], meta: dict, notes_link: str) -> list[str]:
    """One area's rows: the command that re-measures them, their dates, then the table."""
    def f(x, digits=4):
        if x is None:
            return "–"
        return f"{x:.{digits}g}" if isinstance(x, float) else str(x)

    dates = sorted(_when(r, meta).split(", load")[0][-16:-6] for r in rows)
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    loads = any(r.get("run_load") is not None for r in rows)
    lines = [f"Re-measure: {_commands(rows, meta)}. Measured {span}" + (
                 " (each row: its date and the 1-minute load average at its start; 2 cores, so above 2 the "
                 "cores were contended)." if loads else "."), "",
             "| measure | ours | reference | unit | ratio | target | met | note | measured (UTC) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "–"}[r.get("met")]
        ratio = f"{r['ratio']:.3g}×" if r.get("ratio") is not None else "–"
        ref = f"{f(r.get('reference'))} ({r.get('ref_name')})" if r.get("ref_name") else f(r.get("reference"))
        note = short_note(r.get("note", "")).replace("|", "/")
        detail = f"[more]({notes_link}#{measure_name(r)})" if notes_link else ""
        lines.append(f"| {clean(r['measure'])} | {f(r.get('ours'))} | {ref} | {r.get('unit', '')} | {ratio} | "
                     f"{r.get('target', '')} | {met} | {note} {detail} | {_when(r, meta)} |")
    return lines


def render_notes(meta: dict, results: dict[str, dict]) -> str:
    """Every row's whole note and command, one section a measure (``--only`` name)."""
    by_name: dict[str, list[dict]] = {}
    for r in results.values():
        by_name.setdefault(measure_name(r), []).append(r)
    lines = ["# Benchmark notes", "",
             "The whole note of each row of BENCHMARKS.md's generated tables, by the measure that makes it",
             "(`python -m bench --only NAME`). Written by `python -m bench`.", ""]
    for name, rows in by_name.items():
        lines += [f"## {name}", ""]
        for r in rows:
            lines.append(f"- **{clean(r['measure'])}** ({_when(r, meta)}; `{r.get('run_command') or r.get('command')}`):"
                         f" {clean(r.get('note', '')) or '–'}")
        lines.append("")
    return "\n".join(lines)


def grouped(results: dict[str, dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {key: [] for key in AREAS}
    for r in results.values():
        out[area_of(r)].append(r)
    return {k: v for k, v in out.items() if v}


def _marker(area: str) -> tuple[str, str]:
    return f"<!-- bench:{area} (generated by python -m bench) -->", f"<!-- /bench:{area} -->"


def render_markdown(meta: dict, results: dict[str, dict], page: str = "", notes_link: str = "") -> str:
    """``page`` with each area's table rewritten between its markers (the hand-written text
    around them kept); no markers in ``page`` (a new file): a page of the tables alone."""
    tables = {area: render_table(rows, meta, notes_link) for area, rows in grouped(results).items()}
    if page and any(_marker(area)[0] in page for area in AREAS):
        for area, lines in tables.items():
            begin, end = _marker(area)
            if begin not in page:
                continue
            head, _, rest = page.partition(begin)
            _, _, tail = rest.partition(end)
            page = head + "\n".join([begin, *lines, end]) + tail
        return page
    lines = ["# Benchmarks", "", f"`{meta.get('command')}` on {meta.get('machine')}, {meta.get('date')}.", ""]
    for area, table in tables.items():
        lines += [f"## {AREAS[area][0]}", "", *table, ""]
    return "\n".join(lines)
