"""Checkpoints of a Keras run, in the run's ``checkpoints/<step>/`` folders.

Each step folder holds ``params/weights.npz`` (the trainable variables by path: the LoRA
kernels, or every weight for a full fine-tune), ``opt_state/variables.npz`` (the optimizer's
variables by path: iteration, moments) and ``meta/meta.json`` (step, loss, time, finite). A
folder is written under a temporary name, fsync'd and renamed into place, so a numbered folder
is whole; which steps count is ``adapters_lib.runs.checkpoints``' one rule, as on the gemma
route, and so is retention (``prune``). A state with NaN or inf is never written
(``NonFiniteState``).
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
from adapters_lib.runs import checkpoints as rule
from adapters_lib.runs.files import fsync_dir, fsync_file

__all__ = ["NonFiniteState", "discard_from", "prune", "restore", "save"]


class NonFiniteState(ValueError):
    """The state to checkpoint holds NaN or inf: it is not written."""


def _values(variables: list[Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for v in variables:
        key = v.path
        while key in out:  # paths are unique in practice; never overwrite silently
            key += "_"
        out[key] = np.asarray(v.value)
    return out


def save(directory: Path, step: int, model: Any, *, loss: float | None) -> Path:
    """Write checkpoint ``step`` of ``model`` (a compiled keras Model), whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    params = _values(model.trainable_variables)
    opt = _values(model.optimizer.variables)
    if not all(np.isfinite(a).all() for a in (*params.values(), *opt.values())
               if np.issubdtype(a.dtype, np.inexact)):
        raise NonFiniteState(f"the trained values became NaN or infinite by step {step}")
    final = directory / str(step)
    tmp = directory / f".tmp-{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in ("params", "opt_state", "meta"):
        (tmp / sub).mkdir(parents=True)
    np.savez(tmp / "params" / "weights.npz", **params)
    np.savez(tmp / "opt_state" / "variables.npz", **opt)
    (tmp / "meta" / "meta.json").write_text(json.dumps({"step": step, "loss": loss, "time": time.time(),
                                                        "backend": "keras", "finite": True}))
    for f in ("params/weights.npz", "opt_state/variables.npz", "meta/meta.json"):
        fsync_file(tmp / f)
    for sub in ("params", "opt_state", "meta", ""):
        fsync_dir(tmp / sub)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def prune(directory: Path, keep: int, confirmed_below: int | None, pinned: Any = ()) -> None:
    """Apply ``train.keep_checkpoints`` (``runs.checkpoints.prune_plan``)."""
    for old in rule.prune_plan(rule.complete_steps(directory), keep, confirmed_below, pinned):
        shutil.rmtree(directory / str(old), ignore_errors=True)


def discard_from(directory: Path, step: int) -> list[int]:
    """Delete every checkpoint at or after ``step`` (made from diverged weights); what is left."""
    for k, folder in rule.step_folders(directory):
        if k >= step:
            shutil.rmtree(folder, ignore_errors=True)
    return rule.complete_steps(directory)


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
