"""Dataset references in ``[data] path`` (contract): ``hf:NAME[/CONFIG][@SPLIT]``,
``tfds:NAME[:VERSION][@SPLIT]``, and a folder that ``datasets``' ``save_to_disk`` wrote,
``FOLDER[@SPLIT]`` (also spelled ``hf:FOLDER[@SPLIT]``); ``adapters_lib.data.sources`` opens
them.

Parsing only, stdlib only: the config checks use it, and the TUI and the CLI load configs
without numpy, the datasets library or TensorFlow. A saved folder is told from a data folder
by the files ``save_to_disk`` leaves (``saved_dataset_folder``), a look at the disk.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError

PREFIXES = ("hf:", "tfds:")
_SPLIT = re.compile(r"^[A-Za-z0-9_.-]+(\[[^\[\]@]*\])?$")


def saved_dataset_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds what ``save_to_disk`` writes: ``dataset_dict.json``, or two of
    ``state.json``, ``dataset_info.json`` and Arrow shards (a partial one is still a saved
    dataset: opening it says what is missing; a lone ``state.json`` among data files is not)."""
    p = os.path.expanduser(os.fspath(folder))
    if not os.path.isdir(p):  # os.path's checks are False for any OSError (a name too long)
        return False
    if os.path.isfile(os.path.join(p, "dataset_dict.json")):
        return True
    marks = sum(os.path.isfile(os.path.join(p, name)) for name in ("state.json", "dataset_info.json"))
    return marks == 2 or marks == 1 and any(Path(p).glob("*.arrow"))


def split_saved_ref(text: str) -> tuple[str, str] | None:
    """``(folder, split)`` when ``text`` is ``FOLDER`` or ``FOLDER@SPLIT`` of a saved dataset
    folder (``split`` "" = the default), else None. A folder whose own name holds "@" wins."""
    if text.startswith(PREFIXES) or not text:
        return None
    if saved_dataset_folder(text):
        return text, ""
    folder, at, split = text.rpartition("@")
    if at and folder and saved_dataset_folder(folder):
        return folder, split
    return None


def is_dataset_ref(path: Any) -> bool:
    """True when ``path`` names a dataset (``hf:…`` / ``tfds:…``, or a saved dataset folder with
    an optional ``@SPLIT``), which ``data.sources`` reads, not a file or a folder of files."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        return False
    return path.startswith(PREFIXES) or split_saved_ref(path) is not None


@dataclass(frozen=True)
class DatasetRef:
    """A parsed ``hf:``/``tfds:`` reference (see the module doc)."""

    scheme: str
    """"hf" or "tfds"."""
    name: str
    config: str = ""
    """hf: the config after the last "/" (resolved against the cache); tfds: part of ``name``."""
    version: str = ""
    """tfds only; "" = the newest prepared version."""
    split: str = ""
    """The split with its slice, as written; "" = the default split."""
    text: str = ""
    saved: bool = False
    """hf only: ``name`` is a folder that ``save_to_disk`` wrote (not a name in the cache)."""

    @property
    def split_name(self) -> str:
        return self.split.split("[", 1)[0]


def _check_split(text: str, split: str, where: str) -> None:
    if not _SPLIT.match(split):
        raise WorkbenchError(f"{text!r}: split {split!r} is not a split name with an optional "
                             "slice", where=where, hint="e.g. @train, @test[:200], @train[:10%]")


def looks_like_folder(name: str) -> bool:
    """``hf:`` names that are folders (``hf:/a``, ``hf:~/a``, ``hf:./a``), not cache names."""
    return name.startswith(("/", "~", "./", "../"))


def parse_ref(text: str, *, where: str = "[data] path") -> DatasetRef:
    """Parse ``hf:NAME[/CONFIG][@SPLIT]``, ``tfds:NAME[:VERSION][@SPLIT]`` or a saved dataset
    folder's ``FOLDER[@SPLIT]``."""
    if not text.startswith(PREFIXES):
        saved = split_saved_ref(text)
        if saved is None:
            raise WorkbenchError(f"{text!r} is not a dataset: neither hf:…, tfds:… nor a folder "
                                 "that datasets' save_to_disk wrote", where=where,
                                 hint="name a saved dataset folder, hf:NAME or tfds:NAME")
        folder, split = saved
        if split:
            _check_split(text, split, where)
        return DatasetRef("hf", folder, split=split, text=text, saved=True)
    scheme, _, rest = text.partition(":")
    form = "hf:NAME[/CONFIG][@SPLIT]" if scheme == "hf" else "tfds:NAME[:VERSION][@SPLIT]"
    body, at, split = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if at:
        _check_split(text, split, where)
    body = body.strip()
    if not body:
        raise WorkbenchError(f"{text!r} names no dataset", where=where, hint=f"write {form}")
    if scheme == "hf":
        return DatasetRef("hf", body, split=split, text=text, saved=looks_like_folder(body))
    name, _, version = body.partition(":")
    if version and not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise WorkbenchError(f"{text!r}: version {version!r} is not MAJOR.MINOR.PATCH", where=where,
                             hint="e.g. tfds:imdb_reviews:1.0.0, or leave it out for the newest")
    return DatasetRef("tfds", name.strip("/"), version=version, split=split, text=text)
