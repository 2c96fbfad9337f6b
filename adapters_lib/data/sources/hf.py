"""``hf:NAME[/CONFIG][@SPLIT]``: a dataset in the local Hugging Face ``datasets`` cache.

The cache is the folder ``load_dataset`` fills (``HF_DATASETS_CACHE``, default
``~/.cache/huggingface/datasets``): ``<org>___<name>/<config>/<version>/<hash>/`` holding
``dataset_info.json`` and the Arrow shards. It is read through ``datasets``' own ``Cache``
builder (what ``load_dataset`` uses offline), so nothing here can reach the network, and the
Arrow files are memory-mapped: opening a split reads no rows. A folder that
``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` wrote (``FOLDER`` or ``hf:/a/folder``)
is opened by ``saved.open_saved``; the split and slice rules below are the same for both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adapters_lib.data.sources.saved import open_saved
from adapters_lib.data.sources.source import Source, pick_split
from adapters_lib.dataset_refs import DatasetRef
from adapters_lib.errors import WorkbenchError


def cache_dir() -> Path:
    """The datasets cache: ``HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``, else the default."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(home).expanduser() / "datasets"


def cached_configs(root: Path) -> dict[str, Path]:
    """``config → newest <version>/<hash>`` folder of one dataset's cache folder."""
    found: dict[str, Path] = {}
    for info in root.glob("*/*/*/dataset_info.json"):
        folder = info.parent
        best = found.get(folder.parts[-3])
        if best is None or folder.stat().st_mtime > best.stat().st_mtime:
            found[folder.parts[-3]] = folder
    return dict(sorted(found.items()))


def _fetch_hint(name: str, config: str) -> str:
    args = f"{name!r}" + (f", {config!r}" if config else "")
    return (f"on a machine with a network run: python -c \"import datasets; "
            f"datasets.load_dataset({args})\", then copy its cache folder here (or set HF_DATASETS_CACHE)")


def _dir_name(name: str) -> str:
    ns, _, base = name.rpartition("/")
    return f"{ns}___{base}" if ns else base


def _locate(ref: DatasetRef, where: str) -> tuple[str, str, Path, dict[str, Path]]:
    """(name, config, cache folder, configs) of ``ref``; "a/b" is dataset a/b, else a's config b."""
    root = cache_dir()
    candidates = [(ref.name, "")]
    if "/" in ref.name:
        head, _, tail = ref.name.rpartition("/")
        candidates.append((head, tail))
    for name, config in candidates:
        folder = root / _dir_name(name)
        configs = cached_configs(folder) if folder.is_dir() else {}
        if configs and (not config or config in configs):
            return name, config, folder, configs
    for name, config in candidates:
        configs = cached_configs(root / _dir_name(name))
        if configs and config:
            raise WorkbenchError(f"{ref.text}: config {config!r} of {name} is not in the datasets "
                                 f"cache (cached: {', '.join(configs)})", where=where,
                                 hint=_fetch_hint(name, config))
    looked = " or ".join(str(root / _dir_name(n)) for n, _ in candidates)
    raise WorkbenchError(f"{ref.text}: not in the datasets cache (looked in {looked})",
                         where=where, hint=_fetch_hint(*candidates[0]))


def _open_cached(ref: DatasetRef, where: str) -> tuple[Any, str, dict[str, int], Path]:
    """(DatasetDict-like getter, split spec, splits, folder) for a cache entry."""
    name, config, folder, configs = _locate(ref, where)
    if not config:
        if len(configs) > 1:
            raise WorkbenchError(f"{ref.text}: the cache holds several configs "
                                 f"({', '.join(configs)}); which one?", where=where,
                                 hint=f"write hf:{name}/{next(iter(configs))}")
        config = next(iter(configs))
    entry = configs[config]
    info = json.loads((entry / "dataset_info.json").read_text(encoding="utf-8"))
    splits = {k: int(v.get("num_examples") or 0) for k, v in (info.get("splits") or {}).items()}
    split = pick_split(ref, splits, where=where)
    from datasets.packaged_modules.cache.cache import Cache

    version, digest = entry.parts[-2:]
    ns, _, base = name.rpartition("/")
    builder = Cache(cache_dir=str(cache_dir()), dataset_name=base, repo_id=name if ns else None,
                    config_name=config, version=version, hash=digest)
    return (lambda s: builder.as_dataset(split=s)), split, splits, entry


def open_hf(ref: DatasetRef, *, where: str = "[data] path") -> Source:
    """Open ``ref`` (memory-mapped; no rows are read until ``Source.read``)."""
    get, split, splits, folder = (open_saved if ref.saved else _open_cached)(ref, where)
    import datasets

    name = split.split("[", 1)[0]
    whole = get(name)
    try:
        (span,) = datasets.ReadInstruction.from_spec(split).to_absolute({name: whole.num_rows})
    except (ValueError, AssertionError) as e:
        raise WorkbenchError(f"{ref.text}: bad slice ({str(e).splitlines()[0][:160]})", where=where,
                             hint="e.g. @train[:10%], @train[100:200], @test[-50:]") from None
    lo, hi = span.from_, span.to
    if hi <= lo and whole.num_rows:
        raise WorkbenchError(f"{ref.text}: the slice selects no rows (split {name!r} has "
                             f"{whole.num_rows})", where=where,
                             hint=f"use a slice within it, e.g. @{name}[:{min(whole.num_rows, 100)}]")
    ds = whole.with_format(None)

    def reader(start: int, stop: int) -> list[dict[str, Any]]:
        cols = ds[lo + start:lo + stop]
        keys = list(cols)
        return [dict(zip(keys, row, strict=True)) for row in zip(*(cols[k] for k in keys), strict=True)]

    label = ds.features.get("label")
    return Source(ref=ref.text, location=str(folder), num_rows=hi - lo, columns=list(ds.column_names),
                  splits=splits, reader=reader,
                  label_names=list(getattr(label, "names", None) or []))
