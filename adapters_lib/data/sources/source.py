"""An opened dataset source (``Source``) and what the hf: and tfds: openers share: the split
rule and the conversion of their values to JSON-like records. See ``data.sources``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters_lib.data.readers import ReadResult, Record, Where
from adapters_lib.dataset_refs import DatasetRef
from adapters_lib.errors import WorkbenchError

BLOCK = 4096
"""Records read at a time (a whole read goes block by block; the streaming pipeline keeps one)."""


@dataclass
class Source:
    """An opened dataset: rows ``0 … num_rows-1`` of the chosen split (and slice)."""

    ref: str
    location: str
    """The folder it is read from (for messages and ``data list``)."""
    num_rows: int
    columns: list[str]
    splits: dict[str, int] = field(default_factory=dict)
    """Every split of the dataset and its rows."""
    reader: Any = None
    """``reader(start, stop) -> list[dict]``: rows of the selection, in order."""
    label_names: list[str] = field(default_factory=list)
    """A ``label`` column's class names, when the dataset declares them."""

    def read(self, start: int, stop: int) -> list[Record]:
        start, stop = max(0, start), min(self.num_rows, stop)
        if stop <= start:
            return []
        rows = self.reader(start, stop)
        return [Record(row, Where(self.ref, row=start + i + 1)) for i, row in enumerate(rows)]

    def check_field_map(self, field_map: dict[str, str] | None, *,
                        where: str = "[data] field_map") -> None:
        """Refuse a field map naming a column the dataset lacks (``role``/``content`` name keys
        inside a ``messages`` list, not columns)."""
        wrong = [f"{k}={v}" for k, v in (field_map or {}).items()
                 if k not in ("role", "content") and v not in self.columns]
        if wrong:
            raise WorkbenchError(f"{self.ref}: the field map {', '.join(wrong)} names "
                                 f"{'a column' if len(wrong) == 1 else 'columns'} the dataset does "
                                 f"not have (its columns: {', '.join(self.columns) or 'none'})",
                                 where=where, hint="map each field to one of those columns "
                                 "(--field NAME=COLUMN, or [data] field_map)")

    def read_all(self) -> ReadResult:
        out = ReadResult(files=[self.ref])
        for a in range(0, self.num_rows, BLOCK):
            out.records.extend(self.read(a, a + BLOCK))
        return out


def pick_split(ref: DatasetRef, splits: dict[str, int], *, where: str) -> str:
    """The split to read: the one named, else ``train``, else the only one."""
    names = list(splits)
    if ref.split:
        if ref.split_name not in splits:
            raise WorkbenchError(f"{ref.text}: no split {ref.split_name!r} (the dataset has "
                                 f"{', '.join(names) or 'none'})", where=where,
                                 hint=f"use @{names[0]}" if names else None)
        return ref.split
    if "train" in splits or len(names) != 1:
        if "train" not in splits:
            raise WorkbenchError(f"{ref.text}: which split? (no train split; the dataset has "
                                 f"{', '.join(names)})", where=where, hint=f"add @{names[0]}")
        return "train"
    return names[0]


def plain(value: Any) -> Any:
    """A value as JSON-like Python: bytes → text, numpy scalars and arrays → numbers and lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return plain(value.tolist())
    return value
