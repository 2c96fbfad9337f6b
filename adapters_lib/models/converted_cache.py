"""Converted weights kept on disk, across engines: a GGUF is dequantized once per dtype.

Dequantizing the 270M's GGUF takes ~7 s on 2 cores at every load; reading the converted
leaves back is a memory-mapped read (the page cache serves a second engine). An entry is a
folder ``<sha256 of the files>-<dtype>/`` of one ``.npy`` per gemma leaf and a
``manifest.json`` (leaf paths, shapes, dtypes, the source, the size, the last use), written
under a temporary name and renamed when complete: a crash leaves no half entry. Keyed by the
files' content hash (memoised by path, size and mtime in ``digests.json``, so an unchanged
file is hashed once) and the dtype. The least recently used entries go when the folder would
pass its cap.

- ``GEMMA_WORKBENCH_WEIGHTS_CACHE``: the folder (default ``<state dir>/converted-weights``);
  empty turns the cache off.
- ``GEMMA_WORKBENCH_WEIGHTS_CACHE_GB``: the cap (default 8; 0 turns it off).

``report()`` is what ``doctor`` shows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib import paths

log = logging.getLogger(__name__)

Leaves = Iterator[tuple[tuple[str, ...], np.ndarray]]
_LOCK = threading.Lock()


def folder() -> Path | None:
    chosen = os.environ.get("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(paths.state_dir() / "converted-weights"))
    return Path(chosen) if chosen else None


def cap_bytes() -> int:
    from adapters_lib import paths

    return int(paths.env_number("GEMMA_WORKBENCH_WEIGHTS_CACHE_GB") * (1 << 30))


def enabled() -> bool:
    return folder() is not None and cap_bytes() > 0


# --------------------------------------------------------------------------- the key


def files_digest(files: Sequence[Path]) -> str:
    """sha256 over the files' bytes, in order (memoised by path, size and mtime)."""
    root = folder()
    memo_path = root / "digests.json" if root else None
    stamps = []
    for f in files:
        st = Path(f).stat()
        stamps.append(f"{Path(f).resolve()}:{st.st_size}:{st.st_mtime_ns}")
    stamp = "|".join(stamps)
    memo: dict[str, str] = {}
    if memo_path is not None and memo_path.is_file():
        try:
            memo = json.loads(memo_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            memo = {}
    if stamp in memo:
        return memo[stamp]
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(16 << 20):
                h.update(chunk)
    digest = h.hexdigest()
    if memo_path is not None:
        memo[stamp] = digest
        _write_json(memo_path, memo)
    return digest


def _write_json(path: Path, data: Any) -> None:
    paths.ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- read / write


def _leaf_file(i: int) -> str:
    return f"{i:04d}.npy"


def leaves(files: Sequence[Path], dtype: str, convert: Callable[[], Leaves], *, label: str = "") -> Leaves:
    """The converted leaves of ``files`` in ``dtype``: read back from an entry, or made by
    ``convert()`` (and written as a new entry on the way)."""
    if not enabled():
        yield from convert()
        return
    root = folder()
    assert root is not None
    try:
        digest = files_digest(files)
    except OSError as e:
        log.warning("converted-weights cache: cannot hash %s (%s): converting", label, e)
        yield from convert()
        return
    entry = root / f"{digest[:32]}-{dtype}"
    manifest = _manifest(entry)
    if manifest is not None:
        t0 = time.perf_counter()
        yield from _read(entry, manifest)
        manifest["last_used"] = time.time()
        try:
            _write_json(entry / "manifest.json", manifest)
        except OSError:
            pass
        log.info("converted weights of %s (%s) read from the cache in %.1f s", label, dtype,
                 time.perf_counter() - t0)
        return
    yield from _convert_and_write(root, entry, convert, dtype=dtype, label=label, digest=digest)


def _manifest(entry: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if data.get("complete") else None


def _read(entry: Path, manifest: dict[str, Any]) -> Leaves:
    import ml_dtypes

    for i, leaf in enumerate(manifest["leaves"]):
        value = np.load(entry / _leaf_file(i), mmap_mode="c")  # copy-on-write: never the file
        if leaf["dtype"] == "bfloat16":
            value = value.view(ml_dtypes.bfloat16)
        yield tuple(leaf["path"]), value


def _convert_and_write(root: Path, entry: Path, convert: Callable[[], Leaves], *, dtype: str,
                       label: str, digest: str) -> Leaves:
    tmp = root / f".tmp-{entry.name}-{os.getpid()}-{threading.get_ident()}"
    writing = True
    listed: list[dict[str, Any]] = []
    size = 0
    try:
        paths.ensure_private_dir(tmp)
    except OSError as e:
        log.warning("converted-weights cache: %s not writable (%s)", root, e)
        writing = False
    for path, value in convert():
        if writing:
            try:
                stored = value.view(np.uint16) if value.dtype.name == "bfloat16" else value
                np.save(tmp / _leaf_file(len(listed)), np.ascontiguousarray(stored))
                listed.append({"path": list(path), "shape": list(value.shape), "dtype": value.dtype.name})
                size += value.nbytes
            except OSError as e:  # a full disk: this load goes on without the cache
                log.warning("converted-weights cache: not written (%s)", e)
                writing = False
        yield path, value
    if not writing:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    now = time.time()
    _write_json(tmp / "manifest.json", {"complete": True, "source": label, "sha256": digest,
                                        "dtype": dtype, "bytes": size, "leaves": listed,
                                        "created": now, "last_used": now})
    with _LOCK:
        prune(root, keep_free=size)
        try:
            os.replace(tmp, entry)
        except OSError:  # another engine wrote it meanwhile: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted weights of %s (%s, %.0f MB) kept in %s", label, dtype, size / 1e6, root)


# --------------------------------------------------------------------------- size and report


def _entries(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for child in root.iterdir() if root.is_dir() else ():
        if child.is_dir() and not child.name.startswith("."):
            manifest = _manifest(child)
            if manifest is not None:
                out.append((child, manifest))
    return out


def prune(root: Path, *, keep_free: int = 0) -> list[str]:
    """Remove the least recently used entries until they and ``keep_free`` fit the cap."""
    cap = cap_bytes()
    entries = sorted(_entries(root), key=lambda e: e[1].get("last_used", 0))
    total = sum(m.get("bytes", 0) for _, m in entries) + keep_free
    removed = []
    while entries and total > cap:
        path, manifest = entries.pop(0)
        shutil.rmtree(path, ignore_errors=True)
        total -= manifest.get("bytes", 0)
        removed.append(path.name)
    return removed


def report() -> dict[str, Any]:
    """The cache as ``doctor`` shows it: folder, cap, entries (source, dtype, bytes)."""
    root = folder()
    if root is None or cap_bytes() <= 0:
        return {"path": str(root or ""), "enabled": False, "cap_bytes": 0, "bytes": 0, "entries": []}
    entries = [{"source": m.get("source", ""), "dtype": m.get("dtype", ""), "bytes": int(m.get("bytes", 0)),
                "last_used": m.get("last_used")} for _, m in _entries(root)]
    return {"path": str(root), "enabled": True, "cap_bytes": cap_bytes(),
            "bytes": sum(e["bytes"] for e in entries), "entries": entries}
