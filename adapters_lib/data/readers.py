"""Readers: files on disk → raw records, each remembering where it came from.

Supported: ``.jsonl`` (one object a line), ``.json`` (a list of objects), ``.csv`` (a header
row), ``.parquet`` (pyarrow), ``.txt`` (paragraphs separated by blank lines, each a ``text``
record) and a folder of those (sorted, recursive, hidden files skipped). ``hf:…`` and
``tfds:…`` datasets and the folders ``save_to_disk`` wrote are read by
``adapters_lib.data.sources``, which gives the same records (``sources.read_for`` reads
either); a saved dataset inside a folder of files is skipped with a warning that names it.

Reading never stops at the first bad record: a bad line becomes a ``DataIssue`` with its
``file:line`` and the reader moves on. Only what makes a whole file unreadable (missing,
unknown type) raises ``WorkbenchError``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.dataset_refs import is_dataset_ref, saved_dataset_folder
from adapters_lib.errors import WorkbenchError

EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet", ".txt")
MAX_RECORD_BYTES = 4 * 1024 * 1024
"""A line (or record) longer than this is reported and skipped, never parsed."""


@dataclass(frozen=True)
class Where:
    """Where a record came from: ``file:line`` (text files) or ``file:row N`` (parquet)."""

    file: str
    line: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}"
        if self.row is not None:
            return f"{self.file}:row {self.row}"
        return self.file


@dataclass(frozen=True)
class DataIssue:
    """One problem found in the data, citing ``file:line`` and the field."""

    where: Where
    message: str
    field: str = ""
    severity: str = "error"
    """"error": the record was dropped; "warning": kept (or nothing to keep) but worth a look."""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.where.file, "line": self.where.line, "row": self.where.row,
            "field": self.field, "severity": self.severity, "message": self.message,
            "text": str(self),
        }


@dataclass
class Record:
    """A raw record: a dict from a structured file, or a string from a .txt file."""

    data: dict[str, Any] | str
    where: Where


@dataclass
class ReadResult:
    records: list[Record] = field(default_factory=list)
    issues: list[DataIssue] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def read_path(path: str | Path) -> ReadResult:
    """Read a file or a folder of files into records (see the module doc); ``~`` is expanded.
    A dataset (``hf:…``, ``tfds:…``, a saved dataset folder) is ``data.sources``'s to read."""
    if is_dataset_ref(path):
        raise WorkbenchError(f"{path} is a dataset (hf:, tfds: or a saved dataset folder), not a "
                             "file", where="[data] path",
                             hint="read it with adapters_lib.data.sources.read_for (files and datasets)")
    p = Path(path).expanduser()
    hint = ("pass a .jsonl/.json/.csv/.parquet/.txt file, a folder of them, or a folder that "
            "datasets' save_to_disk wrote")
    if not paths.exists(p, where="[data] path", hint=hint):
        raise WorkbenchError(f"data path {str(p)!r} not found", where="[data] path", hint=hint)
    result = ReadResult()
    if p.is_dir():
        saved = sorted(d for d in p.rglob("*") if saved_dataset_folder(d))
        saved = [d for d in saved if not any(o in d.parents for o in saved)]  # a DatasetDict's splits: its own
        for d in saved:
            result.issues.append(DataIssue(Where(str(d)), "skipped: a folder that datasets' "
                                           "save_to_disk wrote; name it alone to read it "
                                           f"([data] path = {str(d)!r})", severity="warning"))
        files = sorted(f for f in p.rglob("*") if f.is_file()
                       and not any(part.startswith(".") for part in f.relative_to(p).parts)
                       and not any(d in f.parents for d in saved))
        for f in files:
            if f.suffix.lower() not in EXTENSIONS:
                result.issues.append(DataIssue(Where(str(f)), f"skipped: {f.suffix or 'no'} extension is "
                                               f"not one of {' '.join(EXTENSIONS)}", severity="warning"))
                continue
            _read_file(f, result)
        if not result.files:
            inside = ""
            if len(saved) == 1:
                inside = f"; or name the saved dataset in it ([data] path = {str(saved[0])!r})"
            elif saved:
                inside = (f"; or name one of the {len(saved)} saved datasets in it "
                          f"(e.g. [data] path = {str(saved[0])!r})")
            raise WorkbenchError(f"folder {str(p)!r} holds no data files", where="[data] path",
                                 hint=f"put {' / '.join(EXTENSIONS)} files in it{inside}")
        return result
    if p.suffix.lower() not in EXTENSIONS:
        raise WorkbenchError(f"{p.name}: unknown data file type {p.suffix or '(none)'!r}", where=str(p),
                             hint=f"use one of {' '.join(EXTENSIONS)}")
    _read_file(p, result)
    return result


def _read_file(p: Path, out: ReadResult) -> None:
    out.files.append(str(p))
    name = str(p)
    try:
        if p.suffix.lower() == ".parquet":
            _read_parquet(p, name, out)
            return
        if p.suffix.lower() == ".jsonl":
            _read_jsonl(p, name, out)
            return
        raw = p.read_bytes()
    except OSError as e:
        raise WorkbenchError(f"cannot read {name}: {e.strerror or e}", where=name) from None
    if not raw.strip():
        out.issues.append(DataIssue(Where(name), "file is empty", severity="warning"))
        return
    suffix = p.suffix.lower()
    nul = raw.find(b"\0")
    if nul >= 0:  # valid UTF-8, but no text file holds NUL: a binary file with a text name
        line = raw.count(b"\n", 0, nul) + 1
        out.issues.append(DataIssue(Where(name, line), f"binary file (a NUL byte at offset {nul}); "
                                    f"not {suffix[1:].upper()} text, skipped"))
        return
    text = _decode(raw, name, out)
    if suffix == ".json":
        _read_json(text, name, out)
    elif suffix == ".csv":
        _read_csv(text, name, out)
    else:
        _read_txt(text, name, out)


def _decode_line(raw: bytes) -> tuple[str | None, str]:
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return None, f"not UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}"


def _decode(raw: bytes, name: str, out: ReadResult) -> str:
    """Decode a whole file; bad bytes become U+FFFD and each bad line is reported once."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    for n, line in enumerate(raw.split(b"\n"), 1):
        text, why = _decode_line(line)
        if text is None:
            out.issues.append(DataIssue(Where(name, n), f"{why}; replaced with U+FFFD "
                                        "(save the file as UTF-8)", severity="warning"))
    return raw.decode("utf-8-sig", errors="replace")


def _too_long(size: int) -> str:
    return (f"record is {size / 1e6:.1f} MB, longer than the {MAX_RECORD_BYTES // (1024 * 1024)} MB "
            "limit for one record; skipped")


def _read_jsonl(p: Path, name: str, out: ReadResult) -> None:
    """Stream the file line by line (a huge line is measured, reported and skipped)."""
    any_text = False
    with open(p, "rb") as f:
        for n, line in enumerate(f, 1):
            if n == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if not line.strip():
                continue
            any_text = True
            where = Where(name, n)
            if len(line) > MAX_RECORD_BYTES:
                out.issues.append(DataIssue(where, _too_long(len(line))))
                continue
            text, why = _decode_line(line)
            if text is None:
                out.issues.append(DataIssue(where, f"{why}; record skipped (save the file as UTF-8)"))
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                out.issues.append(DataIssue(where, f"invalid JSON: {e.msg} at column {e.colno}"))
                continue
            except (RecursionError, ValueError) as e:  # nested too deeply; a 5000-digit number
                out.issues.append(DataIssue(where, f"unreadable JSON: {_why(e)}"))
                continue
            if not isinstance(obj, dict):
                out.issues.append(DataIssue(where, f"record is a JSON {_json_type(obj)}; expected an object"))
                continue
            out.records.append(Record(obj, where))
    if not any_text:
        out.issues.append(DataIssue(Where(name), "file is empty", severity="warning"))


def _why(e: Exception) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return "a number too long to read" if "digits" in str(e) else str(e).splitlines()[0][:120]


def _json_type(obj: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(obj), type(obj).__name__)


def _read_json(text: str, name: str, out: ReadResult) -> None:
    """A JSON list of objects; each element is located to its line for error messages."""
    seen = [0, 1]  # (a position, its line): lines are counted forward in C, never twice

    def line_of(pos: int) -> int:
        at, line = seen
        if pos < at:
            at, line = 0, 1
        line += text.count("\n", at, pos)
        seen[:] = [pos, line]
        return line

    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            out.issues.append(DataIssue(Where(name, e.lineno), f"invalid JSON: {e.msg} at column {e.colno}"))
            return
        except (RecursionError, ValueError) as e:
            out.issues.append(DataIssue(Where(name, 1), f"unreadable JSON: {_why(e)}"))
            return
        if isinstance(obj, dict):
            lists = [k for k, v in obj.items() if isinstance(v, list)]
            hint = f" (records under key {lists[0]!r}? save that list alone, or use .jsonl)" if lists else ""
            out.issues.append(DataIssue(Where(name, 1), f"file is a JSON object; expected a list of records{hint}"))
        else:
            out.issues.append(DataIssue(Where(name, 1), f"file is a JSON {_json_type(obj)}; expected a list of records"))
        return
    pos = _skip_ws(text, pos + 1)
    index = 0
    while pos < len(text) and text[pos] != "]":
        where = Where(name, line_of(pos))
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            out.issues.append(DataIssue(Where(name, e.lineno), f"invalid JSON: {e.msg} at column {e.colno}; "
                                        f"records after item {index} not read"))
            return
        except (RecursionError, ValueError) as e:
            out.issues.append(DataIssue(where, f"unreadable JSON: {_why(e)}; records after item {index} not read"))
            return
        if end - pos > MAX_RECORD_BYTES:
            out.issues.append(DataIssue(where, _too_long(end - pos)))
        elif isinstance(obj, dict):
            out.records.append(Record(obj, where))
        else:
            out.issues.append(DataIssue(where, f"item {index} is a JSON {_json_type(obj)}; expected an object"))
        index += 1
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif pos < len(text) and text[pos] != "]":
            out.issues.append(DataIssue(Where(name, line_of(pos)), "invalid JSON: expected ',' or ']' "
                                        f"after item {index - 1}; the rest is not read"))
            return


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _read_csv(text: str, name: str, out: ReadResult) -> None:
    previous = csv.field_size_limit(MAX_RECORD_BYTES)  # process-wide: restored below
    try:
        _read_csv_rows(text, name, out)
    finally:
        csv.field_size_limit(previous)


def _read_csv_rows(text: str, name: str, out: ReadResult) -> None:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as e:
        out.issues.append(DataIssue(Where(name, 1), f"cannot read the CSV header ({e})"))
        return
    header = [h.strip() for h in header]
    line = reader.line_num
    while True:
        start = line + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            why = (f"a cell is over the {MAX_RECORD_BYTES // (1024 * 1024)} MB limit for one record"
                   if "field larger" in str(e) else f"invalid CSV: {e}")
            out.issues.append(DataIssue(Where(name, start), f"{why}; the rest of the file is not read "
                                        "(fix that row, or use .jsonl, which skips only the bad line)"))
            break
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            out.issues.append(DataIssue(Where(name, start), f"row has {len(row)} cells; the header has "
                                        f"{len(header)} ({', '.join(header)})"))
            continue
        out.records.append(Record(dict(zip(header, row, strict=True)), Where(name, start)))


def _read_txt(text: str, name: str, out: ReadResult) -> None:
    """Paragraphs (blocks separated by blank lines) become ``text`` records."""
    block: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if not block:
                start = n
            block.append(line)
        elif block:
            out.records.append(Record("\n".join(block), Where(name, start)))
            block = []
    if block:
        out.records.append(Record("\n".join(block), Where(name, start)))


def _read_parquet(p: Path, name: str, out: ReadResult) -> None:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise WorkbenchError("reading .parquet needs pyarrow", where=name, hint="pip install pyarrow") from None
    try:
        pf = pq.ParquetFile(p)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise WorkbenchError(f"not a readable parquet file ({e})", where=name) from None
    if pf.metadata.num_rows == 0:
        out.issues.append(DataIssue(Where(name), "file is empty (0 rows)", severity="warning"))
        return
    row = 0
    for batch in pf.iter_batches(batch_size=4096):
        for obj in batch.to_pylist():
            row += 1
            out.records.append(Record(obj, Where(name, row=row)))
