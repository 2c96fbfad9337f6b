"""Loaded base models kept in this process: the next run (or Compare) of the same model
reuses the weights already on the devices instead of reading and converting them again.

``models.loader.load_model`` asks here first. The key is what the load depends on: the
source as asked, the tokenizer, the param dtype, where the params are placed
(``placement_key``: the first device, a single-device sharding, or a mesh's placement) and
a fingerprint of the files (name, size and mtime of each: a model rewritten on disk is
loaded anew). A caller gets its own ``LoadedModel`` record (a shallow copy: setting
``loaded.params = None``, as a full fine-tune does, leaves the kept one whole); the arrays
are shared, and nothing in the project writes into a base model's arrays (the train step
donates its own state, never the base).

``GEMMA_WORKBENCH_MODEL_CACHE``: how many models are kept (default 2; 0 turns it off).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_KEPT: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_LOCK = threading.Lock()
stats = {"hits": 0, "loads": 0}


def capacity() -> int:
    try:
        return max(0, int(os.environ.get("GEMMA_WORKBENCH_MODEL_CACHE", "2")))
    except ValueError:
        return 2


def placement_key(sharding: Any) -> tuple | None:
    """Where a load puts the params, as a key; None when it cannot be named (not kept)."""
    import jax

    if sharding is None:
        return ("device", int(jax.local_devices()[0].id))
    if isinstance(sharding, jax.sharding.Sharding):
        devices = sharding.device_set
        if len(devices) == 1:
            return ("device", int(next(iter(devices)).id))
        try:
            hash(sharding)
        except TypeError:
            return None
        return ("sharding", sharding)
    return getattr(sharding, "placement_key", None)


def files_fingerprint(path: str | Path) -> tuple:
    """(name, size, mtime_ns) of a file, or of each file in a folder (not recursive)."""
    p = Path(path)
    try:
        if p.is_file():
            st = p.stat()
            return ((p.name, st.st_size, st.st_mtime_ns),)
        if p.is_dir():
            return tuple(sorted((c.name, c.stat().st_size, c.stat().st_mtime_ns)
                                for c in p.iterdir() if c.is_file()))
    except OSError:
        pass
    return ()


def kept(key: tuple | None, load: Callable[[], Any]) -> Any:
    """The model kept for ``key`` (a shallow copy of its record), or ``load()``'s."""
    size = capacity()
    if key is None or size == 0:
        return load()
    with _LOCK:
        held = _KEPT.get(key)
        if held is not None:
            _KEPT.move_to_end(key)
            stats["hits"] += 1
    if held is not None:
        log.info("model %s: the weights loaded earlier in this process (no read, no conversion)",
                 held.source)
        return dataclasses.replace(held)
    loaded = load()
    with _LOCK:
        stats["loads"] += 1
        _KEPT[key] = loaded
        while len(_KEPT) > size:
            _KEPT.popitem(last=False)
    return dataclasses.replace(loaded)


def holds(key: tuple | None) -> bool:
    """Whether a model is kept for ``key`` (nothing loaded, nothing moved)."""
    with _LOCK:
        return key is not None and key in _KEPT


def forget() -> None:
    """Drop every kept model (tests; memory)."""
    with _LOCK:
        _KEPT.clear()


def describe() -> list[dict[str, Any]]:
    """The kept models (for ``doctor`` and the engine's status)."""
    with _LOCK:
        return [{"source": m.source, "dtype": k[2], "placement": str(k[3][0])} for k, m in _KEPT.items()]
