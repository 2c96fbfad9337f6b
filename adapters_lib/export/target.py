"""Where an export lands: a fresh folder, or a previous export of this tool replaced whole.

Nothing the user made is deleted. An export is written into a temporary sibling of its
target (``.<name>.export-XXXX/``, same filesystem) and renamed into place when it is
complete, so a failed or interrupted export leaves the target as it was, and a re-export
never leaves the old shards or index beside the new ones (the folder is swapped, not
written into).

The target may be missing or empty. A non-empty target is refused unless ``force`` is
given (or the target is the run's own default folder) **and** it carries this tool's marker
file, ``.gemma-workbench-export.json``, which lists every file that export wrote. A target
holding files the marker does not list (something the user added) is refused even then.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError

MARKER = ".gemma-workbench-export.json"
TOOL = "gemma-workbench"


def files_under(folder: Path) -> list[str]:
    """Every file (and symlink) under ``folder``, as sorted POSIX paths relative to it."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        found += [(rel / name).as_posix() for name in files]
        found += [(rel / name).as_posix() for name in dirs if (Path(root) / name).is_symlink()]
    return sorted(found)


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a previous export in ``folder``, or None (absent, unreadable, not ours)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("tool") != TOOL or not isinstance(data.get("files"), list):
        return None
    return data


def resolve_target(out: str | Path, *, force: bool = False, owned: bool = False,
                   where: str = "--out") -> Path:
    """The absolute folder an export may replace, or a one-line refusal.

    ``owned``: the run's own default folder (``<run>/adapter``...), where replacing a marked
    previous export needs no ``force``.
    """
    path = Path(out).expanduser()
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise WorkbenchError(f"cannot resolve {out} ({e})", where=where) from None
    if path.exists() and not path.is_dir():
        raise WorkbenchError(f"{path} is a file, not a folder", where=where,
                             hint="choose a new or empty folder for the export")
    if not path.is_dir() or not any(path.iterdir()):
        return path
    marker = read_marker(path)
    if marker is None:
        if force:
            raise WorkbenchError(
                f"{path} is not empty and is not an export of gemma-workbench (it has no {MARKER}),"
                " so --force leaves it alone", where=where, hint="choose a new or empty folder")
        raise WorkbenchError(f"{path} is not empty", where=where,
                             hint="choose a new or empty folder (--force replaces only an earlier "
                                  "export of gemma-workbench)")
    if not (force or owned):
        what = f"run {marker.get('run_id')} step {marker.get('step')}" if marker.get("run_id") else "an export"
        raise WorkbenchError(f"{path} holds an earlier export ({what})", where=where,
                             hint="pass --force to replace it, or choose another folder")
    foreign = sorted(set(files_under(path)) - set(marker["files"]) - {MARKER})
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise WorkbenchError(
            f"{path} holds an earlier export plus files it did not write ({foreign[0]}{more}),"
            " so it is left alone", where=where, hint="move those files away, or choose another folder")
    return path


def write_export(out: str | Path, write: Callable[[Path], Any], info: Mapping[str, Any], *,
                 force: bool = False, owned: bool = False, where: str = "--out") -> Path:
    """Run ``write(stage)`` (it creates and fills ``stage``), mark it, and swap it into ``out``.

    The target is checked before and again just before the swap; a previous export there is
    removed only after the new one is in place.
    """
    final = resolve_target(out, force=force, owned=owned, where=where)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        holder = Path(tempfile.mkdtemp(prefix=f".{final.name}.export-", dir=final.parent))
    except OSError as e:
        raise WorkbenchError(f"cannot write beside {final} ({e.strerror or e})", where=where,
                             hint="choose a folder you can write to") from None
    try:
        stage = holder / "export"
        write(stage)
        stage.mkdir(exist_ok=True)
        marker = {"tool": TOOL, "version": _version(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  **dict(info), "files": files_under(stage)}
        (stage / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        resolve_target(final, force=force, owned=owned, where=where)  # nothing changed meanwhile
        _swap(stage, final, holder)
    except OSError as e:
        raise WorkbenchError(f"the export to {final} failed ({e.strerror or e}); {final} is as it was",
                             where=where) from None
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    return final


def _swap(stage: Path, final: Path, holder: Path) -> None:
    if final.is_dir() and any(final.iterdir()):
        previous = holder / "previous"
        os.rename(final, previous)
        try:
            os.rename(stage, final)
        except OSError:
            os.rename(previous, final)
            raise
    else:
        os.rename(stage, final)  # a missing target, or an empty folder replaced


def _version() -> str:
    from adapters_lib import __version__

    return __version__
