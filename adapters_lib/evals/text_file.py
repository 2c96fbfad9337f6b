"""A ``.txt`` file as ``eval`` scores it: as written, one text — BOS + the whole file + EOS.

Blank lines and the final newline are part of the text, as keras-hub's Gemma preprocessing
(``BOS + tokenize(text) + EOS``) and llama.cpp's ``perplexity`` read a file, so a score here is
theirs on the same tokens. (Training reads a ``.txt`` as paragraphs, one example each: that is
``data.readers``' rule for data, not how a file is scored.) A text longer than ``--max-length``
is scored in windows, each after its own BOS, which is context, never scored: the tokens scored
are the text's plus the EOS, whatever the windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class TextFile:
    """The tokenized file (``train``: a ``TokenizedSet``; ``report``: the data report)."""

    train: Any
    report: Any


def is_text_file(path: str | Path, fmt: str) -> bool:
    """A single ``.txt`` file read as text: scored as written."""
    p = Path(path).expanduser()
    return fmt in ("auto", "text") and p.suffix.lower() == ".txt" and p.is_file()


def tokenize_as_written(path: str | Path, tokenizer: Any, *, max_length: int) -> TextFile:
    """The file as one text (``data`` rules otherwise: a file that cannot be read, is empty or
    holds NUL bytes is refused or reported as ``data check`` says it)."""
    from adapters_lib.data.formats import to_examples
    from adapters_lib.data.readers import Record, Where, read_path
    from adapters_lib.data.tokenize import TokenCodec
    from adapters_lib.data.validate import report_for

    p = Path(path).expanduser()
    name = str(p)
    read = read_path(p)  # its issues: empty, binary, bytes that are not UTF-8
    records = []
    if read.records:
        text = p.read_bytes().decode("utf-8-sig", errors="replace")  # as the reader decodes it
        records = [Record(text, Where(name, 1))]
    examples, issues, formats = to_examples(records, "text")
    report = report_for(name, len(records), read.files, read.issues, examples, issues, formats,
                        codec=TokenCodec.from_any(tokenizer), max_length=max_length, loss_on="all",
                        truncation="right")
    report.raise_if_fatal()
    return TextFile(train=report.tokenized, report=report)


def scored_as_written(bos: int, eos: int, scored: int, *, windows: int) -> str:
    """The ``scored`` line of a text file scored as written (``scored``: the tokens counted)."""
    line = (f"the file as written, blank lines and final newline included: BOS (id {bos}) + "
            f"{scored - 1} text tokens + EOS (id {eos}); the {scored} after BOS scored")
    if windows > 1:
        line += f"; in {windows} --max-length windows, each after its own BOS (not scored)"
    return line
