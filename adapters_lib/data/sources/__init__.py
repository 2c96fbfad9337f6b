"""Dataset sources: ``[data] path`` names a file or folder of files (``readers``), or a
dataset (contract):

- ``hf:NAME[/CONFIG][@SPLIT]``: the Hugging Face ``datasets`` cache (``HF_DATASETS_CACHE``,
  default ``~/.cache/huggingface/datasets``), read through ``datasets`` (Arrow, memory-mapped);
- ``FOLDER[@SPLIT]`` (or ``hf:FOLDER[@SPLIT]``): a folder that ``Dataset.save_to_disk`` or
  ``DatasetDict.save_to_disk`` wrote (``saved``), read through ``datasets.load_from_disk``;
- ``tfds:NAME[:VERSION][@SPLIT]``: a prepared TensorFlow Datasets data dir (``TFDS_DATA_DIR``,
  default ``~/tensorflow_datasets``), read through ``tensorflow-datasets``.

``SPLIT`` is a split name with an optional slice in the libraries' own syntax: ``train``,
``test[:200]``, ``train[:10%]``, ``train[10%:20%]``. No split: ``train`` when there is one,
else the only split. Nothing is downloaded: a dataset missing from its cache is one
``WorkbenchError`` naming where it looked and the command that fetches it on a networked
machine.

The seam is records in, records out: ``open_source(ref)`` → ``Source`` (``num_rows``,
``columns``, ``read(start, stop)`` → the same ``Record`` the file readers give, cited as
``ref:row N``), and ``read_source(ref)`` → a whole ``ReadResult`` (what ``readers.read_path``
returns for a file); ``read_for(path)`` reads either, so every consumer of records reads every
source. Given the run's field map, both refuse one that names a column the dataset lacks.
"""

from __future__ import annotations

import os
from pathlib import Path

from adapters_lib.data.readers import ReadResult, read_path
from adapters_lib.data.sources.hf import open_hf
from adapters_lib.data.sources.source import BLOCK, Source, pick_split, plain
from adapters_lib.data.sources.tfds import open_tfds
from adapters_lib.dataset_refs import PREFIXES, DatasetRef, is_dataset_ref, parse_ref

__all__ = ["BLOCK", "PREFIXES", "DatasetRef", "Source", "is_dataset_ref", "open_source", "parse_ref", "read_for",
           "pick_split", "plain", "read_source"]

_OPEN: dict[tuple[str | None, ...], Source] = {}
_CACHE_ENV = ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME", "TFDS_DATA_DIR")


def open_source(text: str | Path, *, where: str = "[data] path",
                field_map: dict[str, str] | None = None) -> Source:
    """The opened source for ``text`` (a cached dataset's is kept per process and cache folder:
    opening a TFDS builder costs); ``field_map``: checked against its columns (``Source.check_field_map``)."""
    text = os.fspath(text)
    key = (text, *(os.environ.get(k) for k in _CACHE_ENV))
    src = _OPEN.get(key)
    if src is None:
        ref = parse_ref(text, where=where)
        src = (open_hf if ref.scheme == "hf" else open_tfds)(ref, where=where)
        if not ref.saved:  # a saved folder may be saved again: opened afresh (memory-mapped, cheap)
            if len(_OPEN) > 16:
                _OPEN.clear()
            _OPEN[key] = src
    src.check_field_map(field_map)
    return src


def read_source(text: str, *, where: str = "[data] path") -> ReadResult:
    """Every record of the source (what ``read_path`` returns for a file)."""
    return open_source(text, where=where).read_all()


def read_for(path: str | Path, field_map: dict[str, str] | None = None) -> tuple[ReadResult, list[str]]:
    """``path``'s records and, for a dataset source, its label class names (``field_map``:
    checked against a dataset's columns)."""
    if is_dataset_ref(path):
        source = open_source(path, field_map=field_map)
        return source.read_all(), source.label_names
    return read_path(path), []
