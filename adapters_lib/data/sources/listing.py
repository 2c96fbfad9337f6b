"""``data list``: the datasets on this machine, without reading them.

Three places: the Hugging Face ``datasets`` cache (``hf:`` names), the TFDS data dir
(``tfds:`` names), and under folders (the ones asked for; by default the data stores'
folders, ``store_folders``: ``<data dir>/data`` and the ``[data] folders`` of settings.toml;
two levels deep) data files and the folders ``save_to_disk`` wrote
(kind ``saved``; the folder is the name). The TUI's browser adds the current directory
(``default_folders``). Each entry: ``name`` (what ``[data] path`` takes),
``kind``, ``splits`` (rows per split), ``rows``, ``bytes`` (on disk), ``format`` (detected from
the columns, as for files), ``columns``, ``labels`` (a label column's class names) and
``location``; a saved folder that cannot be read also has ``problem`` (format ``damaged``).
The caches and saved folders are read from their metadata files (``dataset_info.json``,
``features.json``, the Arrow streams' batch headers), so listing imports neither ``datasets``
nor TensorFlow; a data file is read (when under ``READ_LIMIT`` bytes) to count and detect.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from adapters_lib.data.formats import detect
from adapters_lib.data.layout import columns_layout, layout_of

READ_LIMIT = 64 * 1024 * 1024
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "runs"}


def _disk_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _format_of(columns: Iterable[str]) -> str:
    cols = list(columns)
    return columns_layout(cols) or detect(dict.fromkeys(cols, "")) or "unknown"


def hf_entries() -> list[dict[str, Any]]:
    from adapters_lib.data.sources.hf import cache_dir, cached_configs

    root = cache_dir()
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for ds in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        configs = cached_configs(ds)
        for config, folder in configs.items():
            try:
                info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            name = ds.name.replace("___", "/")
            splits = {k: int(v.get("num_examples") or 0) for k, v in (info.get("splits") or {}).items()}
            features = info.get("features") or {}
            label = features.get("label") if isinstance(features, dict) else None
            out.append({
                "name": f"hf:{name}" + (f"/{config}" if len(configs) > 1 else ""), "kind": "hf",
                "splits": splits, "rows": sum(splits.values()), "bytes": _disk_bytes(folder),
                "format": _format_of(features), "columns": list(features),
                "labels": list(label.get("names") or []) if isinstance(label, dict) else [],
                "location": str(folder)})
    return out


def _tfds_features(folder: Path) -> tuple[list[str], list[str]]:
    try:
        spec = json.loads((folder / "features.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], []
    feats = (spec.get("featuresDict") or {}).get("features") or {}
    labels: list[str] = []
    label_file = folder / "label.labels.txt"
    if "label" in feats and label_file.is_file():
        labels = [line for line in label_file.read_text(encoding="utf-8").splitlines() if line]
    return list(feats), labels


def tfds_entries() -> list[dict[str, Any]]:
    from adapters_lib.data.sources.tfds import data_dir, prepared

    out: list[dict[str, Any]] = []
    for name, folder in prepared(data_dir()):
        try:
            info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        splits = {s["name"]: sum(int(n) for n in s.get("shardLengths") or [])
                  for s in info.get("splits") or []}
        columns, labels = _tfds_features(folder)
        out.append({
            "name": f"tfds:{name}", "kind": "tfds", "splits": splits, "rows": sum(splits.values()),
            "bytes": _disk_bytes(folder), "format": _format_of(columns), "columns": columns,
            "labels": labels, "location": str(folder), "version": folder.name})
    return out


def default_folders() -> list[Path]:
    """The TUI's data browser: this folder and the data stores' folders."""
    return [Path.cwd(), *store_folders()]


def store_folders() -> list[Path]:
    """The folders that hold data on this machine (``data list`` without a folder):
    ``<data dir>/data`` and ``folders = [...]`` of ``[data]`` in ``<config dir>/settings.toml``
    (a relative folder is relative to settings.toml's folder)."""
    import tomllib

    from adapters_lib import paths
    from adapters_lib.errors import WorkbenchError

    file = paths.config_dir() / "settings.toml"
    try:
        section = tomllib.loads(file.read_text(encoding="utf-8")).get("data", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        section = {}  # settings are read leniently: the TUI rewrites a broken file
    folders = section.get("folders", []) if isinstance(section, dict) else []
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise WorkbenchError("[data] folders must be a list of paths", where=f"{file}: [data] folders",
                             hint='write folders = ["/path/to/data", ...]')
    out = [paths.data_dir() / "data"]
    for f in folders:
        folder = file.parent / Path(f).expanduser()
        if folder not in out:
            out.append(folder)
    return out


def stores() -> list[tuple[str, Path]]:
    """Where ``data list`` looks without a folder: (what, where) for each store."""
    from adapters_lib.data.sources.hf import cache_dir
    from adapters_lib.data.sources.tfds import data_dir

    return [("HF datasets cache", cache_dir()), ("TFDS data dir", data_dir()),
            *(("folder", f) for f in store_folders())]


def _data_files(folder: Path, depth: int = 2) -> list[Path]:
    """The data files and the saved dataset folders (not their files) under ``folder``."""
    from adapters_lib.data.readers import EXTENSIONS
    from adapters_lib.dataset_refs import saved_dataset_folder

    found: list[Path] = []
    if not folder.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        if saved_dataset_folder(here):
            found.append(here)
            dirnames[:] = []
            continue
        level = len(here.relative_to(folder).parts)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS
                             and level < depth)
        found += [here / f for f in sorted(filenames)
                  if not f.startswith(".") and Path(f).suffix.lower() in EXTENSIONS]
    return found


def saved_entry(folder: Path) -> dict[str, Any]:
    """A folder that ``save_to_disk`` wrote, from its metadata (``sources.saved.describe``)."""
    from adapters_lib.data.sources.saved import describe

    d = describe(folder)
    return {"name": str(folder), "kind": "saved", "splits": d["splits"], "rows": d["rows"],
            "bytes": _disk_bytes(folder),
            "format": "damaged" if d["problem"] else _format_of(d["columns"]),
            "columns": d["columns"], "labels": d["labels"], "location": str(folder),
            "problem": d["problem"]}


def file_entry(path: Path) -> dict[str, Any]:
    from adapters_lib.data.formats import to_examples
    from adapters_lib.data.readers import read_path
    from adapters_lib.errors import WorkbenchError

    size = path.stat().st_size
    entry: dict[str, Any] = {"name": str(path), "kind": "file", "splits": {}, "rows": None,
                             "bytes": size, "format": "unknown", "columns": [], "labels": [],
                             "location": str(path.parent)}
    if size > READ_LIMIT:
        return entry
    try:
        read = read_path(path)
    except WorkbenchError:
        return entry
    entry["rows"] = len(read.records)
    first = read.records[0].data if read.records else None
    entry["columns"] = sorted(map(str, first)) if isinstance(first, dict) else []
    head = read.records[:256]
    layout = layout_of(head)  # preference pairs, prompts: as ``data check`` names them
    entry["format"] = layout or next(iter(to_examples(head)[2].values()), "unknown")
    return entry


def list_datasets(folders: Iterable[str | Path] | None = None) -> list[dict[str, Any]]:
    """Every dataset in the caches and every data file and saved dataset folder under
    ``folders`` (see the module doc)."""
    out = hf_entries() + tfds_entries()
    seen: set[Path] = set()
    for folder in (default_folders() if folders is None else [Path(f).expanduser() for f in folders]):
        for f in _data_files(folder.resolve()):
            if f not in seen:
                seen.add(f)
                out.append(saved_entry(f) if f.is_dir() else file_entry(f))
    return out


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def render(entries: list[dict[str, Any]]) -> str:
    """The ``data list`` table."""
    if not entries:
        return "no datasets found (HF cache, TFDS data dir, data files, saved dataset folders)"
    rows = [("NAME", "SPLITS", "ROWS", "BYTES", "FORMAT")]
    for e in entries:
        splits = ", ".join(f"{k} {v}" for k, v in e["splits"].items()) or "-"
        fmt = e["format"] + (f" (labels {'/'.join(e['labels'])})" if e["labels"] else "")
        rows.append((e["name"], splits, "-" if e["rows"] is None else str(e["rows"]),
                     human_bytes(e["bytes"]), fmt))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
                     for r in rows)
