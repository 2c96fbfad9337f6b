"""The validation report: what the data holds, what was dropped and why, line by line.

``check_file`` is the one function behind ``gemma-workbench data check``, the TUI's data
preview (through the engine) and the training pipeline's report, so all three say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.config import DataSpec
from adapters_lib.data import chat_template
from adapters_lib.data.formats import Example, demo_examples, to_examples
from adapters_lib.data.layout import PROMPTS, layout_of
from adapters_lib.data.preference import (
    PairSet,
    looks_like_pairs,
    pair_summary,
    render_pairs,
    tokenize_pairs,
)
from adapters_lib.data.readers import DataIssue, ReadResult, Where, read_path
from adapters_lib.data.sources import is_dataset_ref, open_source
from adapters_lib.data.tokenize import TokenCodec, TokenizedSet, example_pieces, tokenize_examples
from adapters_lib.errors import WorkbenchError

LIST_LIMIT = 20
"""Issues shown in the text report per kind (the JSON holds up to JSON_LIMIT)."""
JSON_LIMIT = 1000
TRUNCATION_WARN = 0.1
"""Warn when more than this fraction of examples is truncated."""


@dataclass
class Report:
    path: str
    format: str
    """The detected (or forced) format; "a + b" when files differ."""
    max_length: int
    tokenizer: str = ""
    files: list[str] = field(default_factory=list)
    file_formats: dict[str, str] = field(default_factory=dict)
    records: int = 0
    examples: int = 0
    sequences: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    truncated: int = 0
    chunked: int = 0
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    issues: list[DataIssue] = field(default_factory=list)
    fatal: str | None = None
    split: dict[str, int] = field(default_factory=dict)
    pairs: dict[str, Any] = field(default_factory=dict)
    """Preference data (``data.preference``): pair counts and answer/prompt lengths."""
    _examples: list[Example] = field(default_factory=list, repr=False)
    _tset: TokenizedSet | None = field(default=None, repr=False)
    _markers: tuple[str, str] = field(default=chat_template.GEMMA3_MARKERS, repr=False)

    @property
    def tokenized(self) -> TokenizedSet | None:
        """The checked examples as tokenized (None where the report was made without them)."""
        return self._tset

    @property
    def errors(self) -> list[DataIssue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[DataIssue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def dropped(self) -> int:
        return max(self.records - self.examples, 0)

    @property
    def ok(self) -> bool:
        return self.fatal is None

    @property
    def truncated_fraction(self) -> float:
        return self.truncated / self.examples if self.examples else 0.0

    def raise_if_fatal(self) -> None:
        if self.fatal:
            first = self.errors[0] if self.errors else None
            raise WorkbenchError(self.fatal, where=self.path,
                                 hint=f"first problem: {first}" if first else "run: gemma-workbench data check")

    def histogram(self) -> list[dict[str, int]]:
        """Example lengths (tokens, before truncation) in power-of-two bins."""
        if not len(self.lengths):
            return []
        top = int(self.lengths.max())
        edges = [0, 16]
        while edges[-1] < top:
            edges.append(edges[-1] * 2)
        counts, _ = np.histogram(self.lengths, bins=np.asarray(edges) + 0.5)
        return [{"lo": edges[k] + 1, "hi": edges[k + 1], "count": int(c)} for k, c in enumerate(counts)]

    def length_stats(self) -> dict[str, float]:
        if not len(self.lengths):
            return {}
        q = np.percentile(self.lengths, [50, 95])
        return {"min": int(self.lengths.min()), "median": float(q[0]), "p95": float(q[1]),
                "max": int(self.lengths.max()), "mean": round(float(self.lengths.mean()), 1)}

    def preview(self, n: int = 5) -> list[dict[str, Any]]:
        """The first ``n`` kept examples, formatted as the model sees them.

        Each: ``where``, ``format``, ``text`` (the template text, BOS shown as ``<bos>``),
        ``segments`` ([text, trained] pieces, for colouring) and ``tokens`` (its length).
        """
        out = []
        kept = {int(e): None for e in self._tset.example} if self._tset is not None else None
        for i, ex in enumerate(self._examples):
            if len(out) >= n:
                break
            if kept is not None and i not in kept:
                continue
            pieces = [("<bos>", False)] + [(t, bool(f)) for t, f, _ in example_pieces(ex, "model", self._markers)]
            if ex.kind == "text":
                pieces.append(("<eos>", True))
            item: dict[str, Any] = {"where": str(ex.where), "format": ex.format,
                                    "text": "".join(t for t, _ in pieces),
                                    "segments": [[t, f] for t, f in pieces]}
            if self._tset is not None:
                item["tokens"] = int(self._tset.lengths[self._tset.example == i].sum())
            out.append(item)
        return out

    def to_dict(self, preview: int = 3) -> dict[str, Any]:
        """JSON-able summary: counts, lengths, histogram, every issue (up to JSON_LIMIT), and
        the first ``preview`` examples (``preview()``)."""
        stats = self.length_stats()
        return {
            "ok": self.ok, "fatal": self.fatal, "path": self.path, "format": self.format,
            "file_formats": self.file_formats, "files": self.files, "tokenizer": self.tokenizer,
            "max_length": self.max_length, "records": self.records, "examples": self.examples,
            "dropped": self.dropped, "sequences": self.sequences, "tokens": self.tokens,
            "trained_tokens": self.trained_tokens, "truncated": self.truncated,
            "truncated_fraction": round(self.truncated_fraction, 4), "chunked": self.chunked,
            "lengths": stats, "mean_tokens": stats.get("mean"), "max_tokens": stats.get("max"),
            "histogram": self.histogram(), "split": self.split, "pairs": self.pairs,
            "errors": [i.to_dict() for i in self.errors[:JSON_LIMIT]],
            "warnings": [i.to_dict() for i in self.warnings[:JSON_LIMIT]],
            "error_count": len(self.errors), "warning_count": len(self.warnings),
            "preview": self.preview(preview) if preview else [],
        }

    def render(self) -> str:
        """The human-readable report (what ``data check`` prints)."""
        lines = [f"{self.path}: format {self.format}, {self.records} records → {self.examples} examples"
                 f" ({self.dropped} dropped)"]
        if len(self.file_formats) > 1:
            lines += [f"  {f}: {fmt}" for f, fmt in self.file_formats.items()]
        if self.examples:
            share = self.trained_tokens / self.tokens if self.tokens else 0.0
            lines.append(f"tokens: {self.tokens:,} in {self.sequences:,} sequences, {self.trained_tokens:,} "
                         f"trained ({share:.0%}); tokenizer: {self.tokenizer}")
            s = self.length_stats()
            lines.append(f"length: min {s['min']} · median {s['median']:.0f} · p95 {s['p95']:.0f} · "
                         f"max {s['max']} tokens; max_length {self.max_length}: {self.truncated} truncated "
                         f"({self.truncated_fraction:.1%}), {self.chunked} texts chunked")
            hist = self.histogram()
            peak = max(h["count"] for h in hist) or 1
            for h in hist:
                bar = "█" * round(24 * h["count"] / peak)
                over = "  > max_length" if h["lo"] > self.max_length else ""
                lines.append(f"  {h['lo']:>6}–{h['hi']:<6} {bar} {h['count']}{over}")
        if self.pairs:
            lines.append(render_pairs(self.pairs))
        if self.split:
            lines.append("split: " + ", ".join(f"{k} {v}" for k, v in self.split.items()))
        for title, items in (("errors (records dropped)", self.errors), ("warnings", self.warnings)):
            if items:
                lines.append(f"{title}: {len(items)}")
                lines += [f"  {i}" for i in items[:LIST_LIMIT]]
                if len(items) > LIST_LIMIT:
                    lines.append(f"  … and {len(items) - LIST_LIMIT} more (--json lists them all)")
        if self.fatal:
            lines.append(f"unusable: {self.fatal}")
        return "\n".join(lines)


def analyze(path: str | Path, *, format: str = "auto", field_map: dict[str, str] | None = None,
            codec: TokenCodec, max_length: int, loss_on: str = "model", truncation: str = "right",
            labels: dict[str, str] | None = None, limit: int = 0) -> Report:
    """Read, convert, tokenize and account for every record of ``path`` (a file, a folder, or
    an ``hf:``/``tfds:`` dataset); ``limit`` > 0: a dataset source's first ``limit`` records
    only (files are read whole, as before). Preference pairs when its records carry
    ``chosen`` and ``rejected`` (``data.preference``); prompt-only records are reported as
    ``prompts`` (``data.layout``)."""
    names: list[str] = []
    if is_dataset_ref(path):
        source = open_source(path, field_map=field_map)
        names = source.label_names
        if limit:
            read = ReadResult(records=source.read(0, limit), files=[source.ref])
        else:
            read = source.read_all()
    else:
        read = read_path(path)
    if looks_like_pairs(read.records):
        pset, issues = tokenize_pairs(read.records, codec, max_length=max_length,
                                                 truncation=truncation, field_map=field_map)
        return pair_report(str(path), read, pset, issues, codec=codec, max_length=max_length)
    report = report_for(str(path), len(read.records), read.files, read.issues,
                        *to_examples(read.records, format, field_map, labels=labels, label_names=names),
                        codec=codec, max_length=max_length, loss_on=loss_on, truncation=truncation)
    if format == "auto" and not field_map and layout_of(read.records) == PROMPTS:
        prompts_report(report)
    return report


def prompts_report(report: Report) -> None:
    """Prompt-only records (``data.layout``): named as such, and why SFT has nothing in them."""
    report.format = PROMPTS
    report.file_formats = dict.fromkeys(report.file_formats or report.files, PROMPTS)
    if report.examples == 0 and report.records:
        report.fatal = (f"{report.records} prompt-only records (a prompt, no answer): nothing to "
                        "train on by SFT; they are prompts to answer, e.g. gemma-workbench compare "
                        f"--run RUN --prompts {report.path}")


def report_for(path: str, n_records: int, files: list[str], read_issues: list[DataIssue],
               examples: list[Example], conv_issues: list[DataIssue], file_formats: dict[str, str], *,
               codec: TokenCodec, max_length: int, loss_on: str, truncation: str) -> Report:
    tset = tokenize_examples(examples, codec, max_length=max_length, loss_on=loss_on, truncation=truncation)
    issues = sorted(read_issues + conv_issues + tset.dropped, key=_issue_order)
    kept = len(np.unique(tset.example))
    fmts = sorted(set(file_formats.values()))
    report = Report(
        path=path, format=" + ".join(fmts) or "unknown", max_length=max_length, tokenizer=codec.name,
        files=files, file_formats=file_formats,
        records=n_records + sum(1 for i in read_issues if i.severity == "error"),
        examples=kept, sequences=len(tset), tokens=int(len(tset.tokens)),
        trained_tokens=int(tset.trained.sum()), truncated=tset.truncated, chunked=tset.chunked,
        lengths=tset.raw_lengths, issues=issues, _examples=examples, _tset=tset, _markers=codec.markers,
    )
    if kept and tset.truncated / kept > TRUNCATION_WARN:
        p95 = int(np.percentile(tset.raw_lengths, 95))
        report.issues.append(DataIssue(Where(path), f"{tset.truncated / kept:.0%} of examples are longer than "
                                       f"max_length {max_length} and were truncated (p95 length {p95}); "
                                       "consider raising [data] max_length", severity="warning"))
    if report.records == 0:
        empty = all("empty" in i.message for i in read_issues) and read_issues
        report.fatal = (f"{path} is empty: no records" if empty else f"no records could be read from {path}")
    elif kept == 0:
        report.fatal = f"all {report.records} records were dropped; nothing to train on"
    return report


def pair_report(path: str, read: ReadResult, pset: PairSet, issues: list[DataIssue], *, codec: TokenCodec,
                max_length: int) -> Report:
    """The report of preference data: the chosen side's sequences stand for the examples, and
    ``pairs`` holds the pair counts and lengths (``preference.pair_summary``)."""
    n_records = len(read.records) + sum(1 for i in read.issues if i.severity == "error")
    tokens = int(len(pset.chosen.tokens) + len(pset.rejected.tokens))
    report = Report(
        path=path, format="preference", max_length=max_length, tokenizer=codec.name, files=read.files,
        file_formats={f: "preference" for f in read.files}, records=n_records, examples=len(pset),
        sequences=2 * len(pset), tokens=tokens,
        trained_tokens=int(pset.chosen.trained.sum() + pset.rejected.trained.sum()),
        lengths=np.concatenate([pset.chosen.lengths, pset.rejected.lengths]),
        issues=sorted(read.issues + issues, key=_issue_order), _markers=codec.markers,
        pairs=pair_summary(pset, n_records))
    if n_records == 0:
        report.fatal = f"no records could be read from {path}"
    elif len(pset) == 0:
        report.fatal = f"all {n_records} preference records were dropped; nothing to train on"
    return report


def _issue_order(issue: DataIssue) -> tuple[str, int, int]:
    return (issue.where.file, issue.where.line or 0, issue.where.row or 0)


def check_file(path: str | Path, format: str | None = None, tokenizer: Any = None, max_length: int = 128,
               *, loss_on: str = "model", truncation: str = "right",
               field_map: dict[str, str] | None = None, labels: dict[str, str] | None = None,
               limit: int = 0) -> Report:
    """Validate a data file or folder (or "demo", or an ``hf:``/``tfds:`` dataset) and return its ``Report`` (fatal problems in ``.fatal``).

    ``tokenizer``: a ``gm.text.Tokenizer``, a SentencePiece processor, a ``tokenizer.model``
    path, or None for the demo tokenizer. Raises ``WorkbenchError`` only when the path
    cannot be read at all (missing, unknown file type).
    """
    codec = TokenCodec.from_any(tokenizer)
    if str(path) == "demo":
        train, evals = demo_examples()
        return report_for("demo", len(train) + len(evals), [], [], train + evals, [], {"demo": "chat"},
                          codec=codec, max_length=max_length, loss_on=loss_on, truncation=truncation)
    return analyze(path, format=format or "auto", field_map=field_map, codec=codec,
                   max_length=max_length, loss_on=loss_on, truncation=truncation, labels=labels,
                   limit=limit)


def format_example(messages: list[dict[str, str]]) -> str:
    """The full template text of a conversation (for previews), BOS shown as ``<bos>``."""
    return "<bos>" + chat_template.render(messages)


def check_spec(spec: DataSpec, tokenizer: Any = None) -> Report:
    """``check_file`` with the settings of a run's ``[data]`` section (the TUI preview)."""
    return check_file(spec.path, spec.format, tokenizer, spec.max_length, loss_on=spec.loss_on,
                      truncation=spec.truncation, field_map=spec.field_map, labels=spec.labels)
