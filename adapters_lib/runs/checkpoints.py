"""The one checkpoint rule: which steps of a run's ``checkpoints/`` are whole and usable.

Both routes write one folder per step, under a temporary name renamed into place when every
item is written (orbax: ``<step>.orbax-checkpoint-tmp``; Keras: ``.tmp-<step>-<pid>``), each
with ``params/``, ``opt_state/`` and ``meta/`` (orbax's JSON item ``meta/metadata``; the Keras
route's ``meta/meta.json``). A step is **complete** when:

- its folder is named by the step number alone, and is a real folder (not a link);
- it holds ``params/`` and a ``meta`` that reads as a JSON object;
- its values were finite: ``meta["finite"]`` is not false (the trainers check the params
  before saving and write ``finite: true``; checkpoints older than that check carry no flag
  and were made only after a finite loss) and ``meta["loss"]``, when a number, is finite.

``latest_complete`` is the newest complete step: the one a resume, a sample or an export
uses. Pure Python (no JAX, no orbax): any process can read it.

``prune_plan`` is the one retention rule (``train.keep_checkpoints``): the newest ``keep``
*confirmed* checkpoints stay, and an unconfirmed newer one (its next step's loss is not yet
known finite) never pushes an older confirmed one out, so a divergence right after a save
never leaves a run without a valid checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from adapters_lib.runs.files import read_json

META_FILES = ("metadata", "meta.json")


def step_folders(directory: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every folder named by a step number alone, ascending."""
    d = Path(directory)
    try:
        entries = list(d.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = [(int(p.name), p) for p in entries
           if p.name.isdigit() and not p.is_symlink() and p.is_dir()]
    return sorted(out)


def read_meta(folder: Path) -> dict[str, Any] | None:
    """A checkpoint's meta item (either route), or None when missing or unreadable."""
    for name in META_FILES:
        meta = read_json(folder / "meta" / name)
        if isinstance(meta, dict):
            return meta
    return None


def is_complete(folder: Path) -> bool:
    if not (folder / "params").is_dir():
        return False
    meta = read_meta(folder)
    if meta is None or meta.get("finite") is False:
        return False
    loss = meta.get("loss")
    return not (isinstance(loss, (int, float)) and not math.isfinite(loss))


def complete_steps(directory: str | Path) -> list[int]:
    """Steps with a complete checkpoint under ``directory``, ascending."""
    return [step for step, folder in step_folders(directory) if is_complete(folder)]


def latest_complete(directory: str | Path) -> int | None:
    steps = complete_steps(directory)
    return steps[-1] if steps else None


def prune_plan(steps: list[int], keep: int, confirmed_below: int | None,
               pinned: Iterable[int] = ()) -> list[int]:
    """Steps to delete: all but the newest ``keep`` among those ``< confirmed_below`` (the
    first step whose loss is not yet known finite; None = every step is confirmed).
    Unconfirmed steps are never deleted here (a divergence handler deletes them), nor are
    ``pinned`` ones (e.g. the best checkpoint a hook keeps whatever ``keep`` says)."""
    steps = sorted(steps)
    confirmed = [s for s in steps if confirmed_below is None or s < confirmed_below]
    if keep <= 0:
        return []
    keep_set = set(pinned)
    return [s for s in confirmed[:-keep] if s not in keep_set]
