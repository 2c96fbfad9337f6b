"""Dataset sources: ``[data] path`` names a file or folder (``readers``), or a dataset in a
local cache (contract):

- ``hf:NAME[/CONFIG][@SPLIT]``: the Hugging Face ``datasets`` cache (``HF_DATASETS_CACHE``,
  default ``~/.cache/huggingface/datasets``), read through ``datasets`` (Arrow, memory-mapped),
  or ``hf:/a/folder[@SPLIT]`` that ``Dataset.save_to_disk`` wrote;
- ``tfds:NAME[:VERSION][@SPLIT]``: a prepared TensorFlow Datasets data dir (``TFDS_DATA_DIR``,
  default ``~/tensorflow_datasets``), read through ``tensorflow-datasets``.

``SPLIT`` is a split name with an optional slice in the libraries' own syntax: ``train``,
``test[:200]``, ``train[:10%]``, ``train[10%:20%]``. No split: ``train`` when there is one,
else the only split. Nothing is downloaded: a dataset missing from its cache is one
``WorkbenchError`` naming where it looked and the command that fetches it on a networked
machine.

The seam is records in, records out: ``open_source(ref)`` → ``Source`` (``num_rows``,
``columns``, ``read(start, stop)`` → the same ``Record`` the file readers give, cited as
``ref:row N``), and ``read_source(ref)`` → a whole ``ReadResult`` (what ``read_path`` returns
for a file). ``readers.read_path`` sends these refs here, so every consumer of records reads
every source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.data.readers import ReadResult, Record, Where, read_path
from adapters_lib.dataset_refs import PREFIXES, DatasetRef, is_dataset_ref, parse_ref
from adapters_lib.errors import WorkbenchError

__all__ = ["BLOCK", "PREFIXES", "DatasetRef", "Source", "is_dataset_ref", "open_source", "parse_ref", "read_for",
           "pick_split", "plain", "read_source"]

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

    def read_all(self) -> ReadResult:
        out = ReadResult(files=[self.ref])
        for a in range(0, self.num_rows, BLOCK):
            out.records.extend(self.read(a, a + BLOCK))
        return out


_OPEN: dict[tuple[str | None, ...], Source] = {}
_CACHE_ENV = ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME", "TFDS_DATA_DIR")


def open_source(text: str, *, where: str = "[data] path") -> Source:
    """The opened source for ``text`` (kept per process and cache folder: opening a TFDS
    builder costs)."""
    key = (text, *(os.environ.get(k) for k in _CACHE_ENV))
    src = _OPEN.get(key)
    if src is None:
        ref = parse_ref(text, where=where)
        if ref.scheme == "hf":
            from adapters_lib.data.sources.hf import open_hf

            src = open_hf(ref, where=where)
        else:
            from adapters_lib.data.sources.tfds import open_tfds

            src = open_tfds(ref, where=where)
        if len(_OPEN) > 16:
            _OPEN.clear()
        _OPEN[key] = src
    return src


def read_source(text: str, *, where: str = "[data] path") -> ReadResult:
    """Every record of the source (what ``read_path`` returns for a file)."""
    return open_source(text, where=where).read_all()


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


def read_for(path: str) -> tuple[ReadResult, list[str]]:
    """``path``'s records and, for a dataset source, its label class names."""
    if is_dataset_ref(path):
        source = open_source(path)
        return source.read_all(), source.label_names
    return read_path(path), []
