"""``tfds:NAME[:VERSION][@SPLIT]``: a prepared TensorFlow Datasets data dir.

The data dir is ``TFDS_DATA_DIR``, else ``~/tensorflow_datasets`` (what ``tfds.load`` and
``tfds build`` fill): ``<name>[/<config>]/<version>/`` holding ``dataset_info.json``,
``features.json`` and the record shards. It is opened with ``tfds.builder_from_directory``,
which needs no builder code (a dataset prepared elsewhere reads the same), and rows are read
a block at a time through ``as_dataset(split="train[a:b]")``: a slice opens only the shards
that hold it. TensorFlow is imported here, when a ``tfds:`` path is first read, never at
start-up; it is kept off the GPU (JAX owns the accelerators).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from adapters_lib.data.sources.source import Source, pick_split, plain
from adapters_lib.dataset_refs import DatasetRef
from adapters_lib.errors import WorkbenchError

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def data_dir() -> Path:
    """``TFDS_DATA_DIR``, else ``~/tensorflow_datasets``."""
    return Path(os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets").expanduser()


def versions(folder: Path) -> list[str]:
    """The prepared versions in ``folder`` (oldest first)."""
    if not folder.is_dir():
        return []
    found = [p.name for p in folder.iterdir()
             if _VERSION.match(p.name) and (p / "dataset_info.json").is_file()]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def prepared(root: Path) -> list[tuple[str, Path]]:
    """Every ``(name[/config], version folder)`` prepared under the data dir (newest version)."""
    out: list[tuple[str, Path]] = []
    if not root.is_dir():
        return out
    for ds in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "downloads"))):
        if versions(ds):
            out.append((ds.name, ds / versions(ds)[-1]))
            continue
        for cfg in sorted(p for p in ds.iterdir() if p.is_dir()):
            if versions(cfg):
                out.append((f"{ds.name}/{cfg.name}", cfg / versions(cfg)[-1]))
    return out


def _fetch_hint(name: str, root: Path) -> str:
    return (f"on a machine with a network run: tfds build {name} --data_dir {root} (or "
            f"python -c \"import tensorflow_datasets as tfds; tfds.builder({name!r}).download_and_prepare()\"), "
            "then copy the data dir here (or set TFDS_DATA_DIR)")


def locate(ref: DatasetRef, where: str) -> Path:
    """The version folder of ``ref`` in the data dir."""
    root = data_dir()
    folder = root / ref.name
    found = versions(folder)
    if not found and folder.is_dir():
        configs = sorted(p.name for p in folder.iterdir() if p.is_dir() and versions(p))
        preferred = [c for c in ("plain_text", "default") if c in configs]
        if len(configs) == 1 or preferred:  # tfds' first config is the default; these two are common
            folder = folder / (preferred[0] if preferred else configs[0])
            found = versions(folder)
        elif configs:
            raise WorkbenchError(f"{ref.text}: {folder} holds several configs ({', '.join(configs)}); "
                                 "which one?", where=where, hint=f"write tfds:{ref.name}/{configs[0]}")
    if not found:
        raise WorkbenchError(f"{ref.text}: not prepared in the TFDS data dir (looked in {folder})",
                             where=where, hint=_fetch_hint(ref.name, root))
    if ref.version and ref.version not in found:
        raise WorkbenchError(f"{ref.text}: version {ref.version} is not prepared in {folder} "
                             f"(prepared: {', '.join(found)})", where=where,
                             hint=f"use tfds:{ref.name}:{found[-1]}, or leave the version out")
    return folder / (ref.version or found[-1])


def _tensorflow_off_gpu() -> None:
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):  # already initialised: nothing to hide any more
        pass


def open_tfds(ref: DatasetRef, *, where: str = "[data] path") -> Source:
    """Open ``ref``: its splits and row counts come from ``dataset_info.json``; rows are read on demand."""
    folder = locate(ref, where)
    _tensorflow_off_gpu()
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(folder))
    splits = {name: int(info.num_examples) for name, info in builder.info.splits.items()}
    split = pick_split(ref, splits, where=where)
    try:
        (span,) = tfds.core.ReadInstruction.from_spec(split).to_absolute(builder.info.splits)
    except (ValueError, AssertionError, KeyError) as e:
        raise WorkbenchError(f"{ref.text}: bad slice ({str(e).splitlines()[0][:160]})", where=where,
                             hint="e.g. @train[:10%], @train[100:200], @test[-50:]") from None
    name = span.splitname
    lo = int(span.from_ or 0)
    hi = int(splits[name] if span.to is None else span.to)

    def reader(start: int, stop: int) -> list[dict[str, Any]]:
        ds = builder.as_dataset(split=f"{name}[{lo + start}:{lo + stop}]", shuffle_files=False)
        return [plain(row) for row in tfds.as_numpy(ds)]

    features = builder.info.features
    label = features["label"] if "label" in features.keys() else None
    return Source(ref=ref.text, location=str(folder), num_rows=hi - lo, columns=list(features.keys()),
                  splits=splits, reader=reader, label_names=list(getattr(label, "names", None) or []))
