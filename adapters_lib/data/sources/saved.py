"""A folder that ``datasets``' ``save_to_disk`` wrote: ``FOLDER[@SPLIT]`` (or ``hf:FOLDER``).

Two layouts (``datasets`` 2.x–5.x):

- ``Dataset.save_to_disk``: ``dataset_info.json``, ``state.json`` (its ``_data_files`` name the
  Arrow shards, ``_split`` the split it was loaded as) and ``data-0000N-of-0000M.arrow``;
  one split, named ``_split`` when set, else ``train``;
- ``DatasetDict.save_to_disk``: ``dataset_dict.json`` (``{"splits": [...]}``) and one such
  folder per split.

The chosen split is opened with ``datasets.load_from_disk`` on its own folder (memory-mapped:
no rows are read until asked, and a broken other split does not stop this one). Everything
that can be wrong with a folder (a split that is not there, a missing or cut shard, a state
file that is not JSON) is one ``WorkbenchError`` saying which file and what to do.

``describe`` reads the same folders for ``data list`` from their metadata and the Arrow
streams' batch headers (pyarrow, memory-mapped; ``datasets`` is not imported).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from adapters_lib.data.sources.source import pick_split
from adapters_lib.dataset_refs import DatasetRef
from adapters_lib.errors import WorkbenchError

_SPLIT_NAME = re.compile(r"\w+(\.\w+)*")
"""A split name as ``datasets`` allows it (``datasets.splits._split_re``)."""
RESAVE = "save it again with Dataset.save_to_disk / DatasetDict.save_to_disk"


def _json(path: Path, ref: str, where: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise WorkbenchError(f"{ref}: cannot read {path} ({e.strerror or e})", where=where,
                             hint="check the path and its permissions") from None
    except ValueError as e:
        raise WorkbenchError(f"{ref}: {path} is not valid JSON ({str(e).splitlines()[0][:120]}); "
                             "the saved dataset is damaged", where=where, hint=RESAVE) from None


def split_folders(folder: Path, ref: str, where: str) -> dict[str, Path]:
    """``split → its folder`` of a saved dataset (one entry for a ``Dataset`` folder)."""
    dict_file = folder / "dataset_dict.json"
    if dict_file.is_file():
        names = _json(dict_file, ref, where)
        names = names.get("splits") if isinstance(names, dict) else None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise WorkbenchError(f"{ref}: {dict_file} lists no splits (expected "
                                 '{"splits": ["train", ...]})', where=where, hint=RESAVE)
        odd = [n for n in names if not _SPLIT_NAME.fullmatch(n)]
        if odd:
            raise WorkbenchError(f"{ref}: {dict_file} lists {odd[0]!r}, not a split name (datasets "
                                 "names splits like train, test, validation)", where=where, hint=RESAVE)
        return {name: folder / name for name in names}
    state = folder / "state.json"
    missing = [n for n in ("dataset_info.json", "state.json") if not (folder / n).is_file()]
    if missing:
        cache = ("; it looks like a datasets cache entry (no data-*.arrow shards): name it "
                 "hf:NAME instead" if not state.exists() and any(folder.glob("*.arrow"))
                 and not any(folder.glob("data-*-of-*.arrow")) else "")
        raise WorkbenchError(f"{ref}: a partial saved dataset ({' and '.join(missing)} missing in "
                             f"{folder}){cache}", where=where,
                             hint=RESAVE if not cache else "see gemma-workbench data list")
    fields = _json(state, ref, where)
    if not isinstance(fields, dict):
        raise WorkbenchError(f"{ref}: {state} is not a datasets state file (a JSON "
                             f"{type(fields).__name__}, not an object)", where=where, hint=RESAVE)
    split = fields.get("_split")
    return {str(split) if split else "train": folder}


def _load(folder: Path, ref: str, split: str, where: str) -> Any:
    """The split's ``datasets.Dataset`` (memory-mapped)."""
    if not folder.is_dir():
        raise WorkbenchError(f"{ref}: split {split!r} is listed in dataset_dict.json but its folder "
                             f"{folder} is missing", where=where, hint=RESAVE)
    for name in ("dataset_info.json", "state.json"):
        if not (folder / name).is_file():
            raise WorkbenchError(f"{ref}: split {split!r} is incomplete: {folder / name} is missing",
                                 where=where, hint=RESAVE)
    import datasets

    try:
        return datasets.Dataset.load_from_disk(str(folder))
    except FileNotFoundError as e:
        missing = e.filename or str(e).splitlines()[0][:160]
        raise WorkbenchError(f"{ref}: split {split!r} is incomplete: {missing} is missing", where=where,
                             hint=RESAVE) from None
    except (ValueError, KeyError, TypeError, OSError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise WorkbenchError(f"{ref}: split {split!r} in {folder} cannot be read (a cut or damaged "
                             f"Arrow shard or state file: {str(e).splitlines()[0][:160]})", where=where,
                             hint=RESAVE) from None


def open_saved(ref: DatasetRef, where: str) -> tuple[Any, str, dict[str, int], Path]:
    """``(split name → Dataset, split spec, splits and their rows, folder)`` of a saved folder:
    the shape ``hf.open_hf`` takes (the other splits' rows come from their shards' headers; one
    that cannot be read is left out)."""
    folder = Path(ref.name).expanduser()
    if not os.path.isdir(folder):  # False, not an OSError, for a name too long
        raise WorkbenchError(f"{ref.text}: folder {str(folder)!r} not found", where=where,
                             hint="name a folder that Dataset.save_to_disk wrote")
    folders = split_folders(folder, ref.text, where)
    split = pick_split(ref, dict.fromkeys(folders, 0), where=where)
    name = split.split("[", 1)[0]
    chosen = _load(folders[name], ref.text, name, where)
    rows = {s: chosen.num_rows if s == name else arrow_rows(f) for s, f in folders.items()}
    return (lambda s: chosen), split, {s: n for s, n in rows.items() if n is not None}, folder


def _shards(folder: Path) -> list[Path]:
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        return [folder / f["filename"] for f in state.get("_data_files") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return sorted(folder.glob("*.arrow"))


def arrow_rows(folder: Path) -> int | None:
    """Rows in a saved split's shards, from the Arrow streams' batch headers; None if unreadable."""
    import pyarrow as pa

    shards = _shards(folder) if folder.is_dir() else []
    if not shards:
        return None
    total = 0
    try:
        for shard in shards:
            with pa.memory_map(str(shard)) as source:
                reader = pa.ipc.open_stream(source)
                total += sum(batch.num_rows for batch in reader)
    except (OSError, ValueError):  # pyarrow.ArrowInvalid is a ValueError
        return None
    return total


def _features(folder: Path) -> tuple[list[str], list[str]]:
    """(columns, a ``label`` column's class names) from a split's ``dataset_info.json``."""
    try:
        info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], []
    features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict):
        return [], []
    label = features.get("label")
    names = label.get("names") if isinstance(label, dict) else None
    return list(features), [str(n) for n in names or []]


def _split_problem(name: str, folder: Path, rows: int | None) -> str | None:
    if not folder.is_dir():
        return f"split {name!r}: its folder {folder} is missing"
    for f in ("dataset_info.json", "state.json"):
        if not (folder / f).is_file():
            return f"split {name!r}: {folder / f} is missing"
    return f"split {name!r}: an Arrow shard is missing or cut" if rows is None else None


def describe(folder: Path) -> dict[str, Any]:
    """``data list``'s fields of a saved folder (splits, rows, columns, labels); ``problem`` says
    why it cannot be read whole, when it cannot (a split that can is still listed)."""
    try:
        folders = split_folders(folder, str(folder), "data list")
    except WorkbenchError as e:
        return {"splits": {}, "rows": None, "columns": [], "labels": [], "problem": e.message}
    splits = {name: arrow_rows(f) for name, f in folders.items()}
    problems = [p for name, f in folders.items() if (p := _split_problem(name, f, splits[name]))]
    columns, labels = _features(next(iter(folders.values())))
    return {"splits": {k: v for k, v in splits.items() if v is not None},
            "rows": None if problems else sum(n for n in splits.values() if n is not None),
            "columns": columns, "labels": labels, "problem": "; ".join(problems) or None}
