"""GGUF headers remembered on disk, so that listing the catalog again costs a ``stat`` per file.

Reading a header needs numpy and the ``gguf`` package (~0.6 s to import on 2 cores) and a
walk over the metadata (~0.1-0.5 s a file); a listing that finds every header here imports
neither. ``<data dir>/catalog/gguf-headers.json`` maps ``realpath|size|mtime_ns|logical_size``
to the ``GGUFInfo`` read (``models.gguf.gguf_info.info_to_json``) or to the ``GGUFError`` it
raised: a file that changes (a download that finishes, a re-quantized file) has a new key
and is read again, as is a split file when one of its other shards changed. Entries of files that are gone are dropped when the cache is written;
an unreadable or foreign cache file is ignored and rewritten. ``VERSION`` changes when
``read_info`` reports something new, which drops every older entry.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.models.gguf import GGUFError, GGUFInfo, info_from_json, info_to_json

log = logging.getLogger(__name__)

VERSION = 1
MAX_ENTRIES = 256


def cache_file() -> Path:
    return paths.data_dir() / "catalog" / "gguf-headers.json"


def _key(real: str, st: os.stat_result, logical_size: int | None) -> str:
    return f"{real}|{st.st_size}|{st.st_mtime_ns}|{logical_size or ''}"


def _stamps(shards: list[str]) -> list[list[int] | None]:
    out: list[list[int] | None] = []
    for shard in shards:
        try:
            st = os.stat(shard)
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


def _load() -> dict[str, Any]:
    try:
        data = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or \
            not isinstance(data.get("headers"), dict):
        return {}
    return data["headers"]


def _store(key: str, value: dict[str, Any]) -> None:
    headers = _load()
    headers.pop(key, None)
    headers[key] = value  # the newest last: the oldest go first past MAX_ENTRIES
    headers = {k: v for k, v in headers.items() if os.path.exists(k.split("|", 1)[0])}
    headers = dict(list(headers.items())[-MAX_ENTRIES:])
    target = cache_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "headers": headers}, f)
            os.replace(tmp, target)  # concurrent writers: the last wins, the others re-read
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:  # a read-only data dir: list without the cache
        log.debug("cannot write %s: %s", target, e)


def read_header(real: str, st: os.stat_result, logical_size: int | None) -> GGUFInfo:
    """``read_info`` of ``real`` (an absolute, resolved path with ``st`` its ``stat``), from
    the cache when it holds this version of the file; raises ``GGUFError`` as ``read_info``
    does (a cached failure too)."""
    key = _key(real, st, logical_size)
    hit = _load().get(key)
    if isinstance(hit, dict):
        try:
            if "error" in hit:
                raise GGUFError(hit["error"], hit["status"])
            if hit["stamps"] == _stamps(hit["shards"][1:]):  # a split file's other shards too
                return info_from_json(hit)
        except (KeyError, TypeError, IndexError, ValueError):
            log.debug("ignoring a damaged cached header of %s", real)
    from adapters_lib.models.gguf import read_info

    try:
        info = read_info(real, logical_size=logical_size)
    except GGUFError as e:
        _store(key, {"error": e.reason, "status": e.status})
        raise
    try:
        value = info_to_json(info)
        value["stamps"] = _stamps(value["shards"][1:])
        json.dumps(value)  # metadata that JSON cannot hold: not cached, still returned
    except (TypeError, ValueError):
        return info
    _store(key, value)
    return info
