"""Checkpoints of a Keras run, in the run's ``checkpoints/<step>/`` folders.

Each step folder holds ``params/weights.npz`` (the trainable variables by path: the LoRA
kernels, or every weight for a full fine-tune), ``opt_state/variables.npz`` (the optimizer's
variables by path: iteration, moments) and ``meta/meta.json`` (step, loss, time). A folder is
written under a temporary name and renamed into place, so a numbered folder is whole (the
same "numbered folder with params/" rule as ``adapters_lib.train.checkpoints.checkpoint_steps``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from adapters_lib.errors import WorkbenchError


def checkpoint_steps(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p / "params" / "weights.npz").is_file())


def _values(variables: list[Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for v in variables:
        key = v.path
        while key in out:  # paths are unique in practice; never overwrite silently
            key += "_"
        out[key] = np.asarray(v.value)
    return out


def save(directory: Path, step: int, model: Any, *, loss: float | None, keep: int) -> Path:
    """Write checkpoint ``step`` of ``model`` (a compiled keras Model) and prune to ``keep``."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / str(step)
    tmp = directory / f".tmp-{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("params", "opt_state", "meta"):
        (tmp / sub).mkdir(parents=True)
    np.savez(tmp / "params" / "weights.npz", **_values(model.trainable_variables))
    np.savez(tmp / "opt_state" / "variables.npz", **_values(model.optimizer.variables))
    (tmp / "meta" / "meta.json").write_text(json.dumps({"step": step, "loss": loss, "time": time.time(),
                                                        "backend": "keras"}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_steps(directory)[:-keep]:
        shutil.rmtree(directory / str(old), ignore_errors=True)
    return final


def _assign(variables: list[Any], values: Any, what: str, where: Path) -> None:
    names = set(values.files)
    for v in variables:
        if v.path not in names:
            raise WorkbenchError(f"checkpoint {where} has no {what} {v.path!r}", where=str(where),
                                 hint="resume with the config the run was started with")
        arr = values[v.path]
        if tuple(arr.shape) != tuple(v.shape):
            raise WorkbenchError(f"checkpoint {what} {v.path} has shape {arr.shape}, the model {tuple(v.shape)}",
                                 where=str(where), hint="resume with the config the run was started with")
        v.assign(arr)


def restore(directory: Path, step: int, model: Any, *, optimizer: bool = True) -> dict[str, Any]:
    """Load checkpoint ``step`` into ``model`` (its optimizer built first); return the meta."""
    folder = directory / str(step)
    with np.load(folder / "params" / "weights.npz") as values:
        _assign(model.trainable_variables, values, "weight", folder)
    if optimizer:
        model.optimizer.build(model.trainable_variables)
        with np.load(folder / "opt_state" / "variables.npz") as values:
            _assign(model.optimizer.variables, values, "optimizer variable", folder)
    return json.loads((folder / "meta" / "meta.json").read_text())
