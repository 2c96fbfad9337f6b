"""Dataset references in ``[data] path`` (contract): ``hf:NAME[/CONFIG][@SPLIT]`` and
``tfds:NAME[:VERSION][@SPLIT]`` (see ``adapters_lib.data.sources``, which opens them).

Parsing only, stdlib only: the config checks use it, and the TUI and the CLI load configs
without numpy, the datasets library or TensorFlow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from adapters_lib.errors import WorkbenchError

PREFIXES = ("hf:", "tfds:")
_SPLIT = re.compile(r"^[A-Za-z0-9_.-]+(\[[^\[\]@]*\])?$")


def is_dataset_ref(path: Any) -> bool:
    """True when ``path`` names a dataset in a cache (``hf:…`` / ``tfds:…``), not a file."""
    return isinstance(path, str) and path.startswith(PREFIXES)


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

    @property
    def split_name(self) -> str:
        return self.split.split("[", 1)[0]


def parse_ref(text: str, *, where: str = "[data] path") -> DatasetRef:
    """Parse ``hf:NAME[/CONFIG][@SPLIT]`` or ``tfds:NAME[:VERSION][@SPLIT]``."""
    scheme, _, rest = text.partition(":")
    form = "hf:NAME[/CONFIG][@SPLIT]" if scheme == "hf" else "tfds:NAME[:VERSION][@SPLIT]"
    body, at, split = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if at and not _SPLIT.match(split):
        raise WorkbenchError(f"{text!r}: split {split!r} is not a split name with an optional "
                             "slice", where=where, hint="e.g. @train, @test[:200], @train[:10%]")
    body = body.strip()
    if not body:
        raise WorkbenchError(f"{text!r} names no dataset", where=where, hint=f"write {form}")
    if scheme == "hf":
        return DatasetRef("hf", body, split=split, text=text)
    name, _, version = body.partition(":")
    if version and not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise WorkbenchError(f"{text!r}: version {version!r} is not MAJOR.MINOR.PATCH", where=where,
                             hint="e.g. tfds:imdb_reviews:1.0.0, or leave it out for the newest")
    return DatasetRef("tfds", name.strip("/"), version=version, split=split, text=text)
