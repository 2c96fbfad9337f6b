"""Durable small files of a run directory: JSON replaced atomically, JSON lines appended.

- ``write_json_atomic``: a temporary sibling, ``fsync``, ``os.replace``, then ``fsync`` of the
  folder, so a reader sees the old or the new file whole, and after a crash (power loss
  included) the new one is there once the call returned.
- ``append_jsonl``: one line, flushed and ``fsync``'d (``durable=False`` only flushes: a
  killed process still leaves it, the page cache keeps it).
- ``iter_jsonl``: tolerant reader (a writer may be mid-append: a torn line is skipped).
- ``dir_lock``: an exclusive ``flock`` on a folder, for read-check-write of a run's state by
  several threads or processes. Where the file system has no locks (some network file
  systems) it degrades to no lock rather than failing the write.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` as JSON: whole or not at all, durable when asked."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = json.dumps(data, indent=1) + "\n"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def append_jsonl(path: Path, record: dict[str, Any], *, durable: bool = True) -> None:
    append_jsonl_many(path, [record], durable=durable)


def append_jsonl_many(path: Path, records: Iterable[dict[str, Any]], *, durable: bool = True) -> None:
    """Append records, one JSON object a line, in one write (flushed; fsync'd when durable)."""
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)
    if not text:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if durable:
            os.fsync(f.fileno())


def fsync_file(path: Path) -> None:
    """``fsync`` an existing file (e.g. metrics.jsonl before a checkpoint)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file; a torn or garbled line (a writer mid-append) is skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            yield record


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def dir_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder ``path`` (threads and processes alike).

    A missing folder raises ``FileNotFoundError``: a run whose folder was removed is not
    written to (nothing is re-created behind the user's back).
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no flock on this file system: go on unlocked
            pass
        yield
    finally:
        os.close(fd)  # releases the lock
