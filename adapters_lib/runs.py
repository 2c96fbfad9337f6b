"""The run directory (contract): one folder per training run, readable by any process.

::

    <runs dir>/<run-id>/
        config.toml      the fully resolved RunConfig
        metrics.jsonl    one JSON object per logged step (step, loss, lr, grad_norm, ...)
        events.jsonl     {"time", "kind", ...}: state changes, checkpoints, evals, errors
        status.json      {"state", "step", "total_steps", "updated", ...}, replaced atomically
        checkpoints/     orbax CheckpointManager, one sub-dir per step
        adapter/         the exported adapter (written by the export area)

Run ids are ``YYYYmmdd-HHMMSS-<name>`` (``demo`` when the run has no name), unique in their
parent. Readers tolerate a torn last line (a writer may be mid-append). Importing this module
is cheap: JAX is imported only by ``load_tuned``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError

STATES = ("queued", "running", "stopping", "stopped", "completed", "failed", "interrupted")
ACTIVE_STATES = ("queued", "running", "stopping")
"""States in which a process is (or should be) working on the run."""
RESUMABLE_STATES = ("stopped", "failed", "interrupted")


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory, and small readers/writers over them."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def adapter_dir(self) -> Path:
        return self.path / "adapter"

    # ----------------------------------------------------------------- reading

    def exists(self) -> bool:
        return self.config_path.is_file()

    def config(self):
        """The run's resolved ``RunConfig``."""
        from adapters_lib.config import load_config

        return load_config(self.config_path)

    def metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_path)

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.events_path)

    def status(self) -> dict[str, Any]:
        """The last status written; ``{"state": "queued", ...}`` before any."""
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"state": "queued", "step": 0, "total_steps": 0, "updated": None}
        except json.JSONDecodeError:  # never torn (os.replace); only a hand-edited file
            return {"state": "interrupted", "step": 0, "total_steps": 0, "updated": None}

    @property
    def state(self) -> str:
        return str(self.status().get("state", "queued"))

    # ----------------------------------------------------------------- writing

    def append_metrics(self, record: dict[str, Any]) -> None:
        append_jsonl(self.metrics_path, record)

    def append_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"time": _now(), "kind": kind, **fields}
        append_jsonl(self.events_path, record)
        return record

    def write_status(self, state: str, **fields: Any) -> dict[str, Any]:
        """Replace status.json atomically (tmp file + ``os.replace``), merging ``fields``."""
        if state not in STATES:
            raise ValueError(f"unknown run state {state!r}")
        status = self.status()
        status.update(fields)
        status.update(state=state, run_id=self.run_id, updated=_now())
        write_json_atomic(self.status_path, status)
        return status

    def set_state(self, state: str, message: str = "", **fields: Any) -> dict[str, Any]:
        """Write the state to status.json and a ``state`` event to events.jsonl."""
        extra = {"message": message} if message else {}
        status = self.write_status(state, **fields, **extra)
        self.append_event("state", state=state, step=status.get("step", 0), **extra)
        return status

    def truncate_metrics_after(self, step: int) -> None:
        """Drop metric lines past ``step`` (a resume re-runs them from the checkpoint)."""
        kept = [m for m in self.metrics() if int(m.get("step", 0)) <= step]
        tmp = self.metrics_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(m) + "\n" for m in kept), encoding="utf-8")
        os.replace(tmp, self.metrics_path)


# --------------------------------------------------------------------------- files


def _now() -> float:
    return round(time.time(), 3)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, allow_nan=True) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file; a torn or garbled line (a writer mid-append) is skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
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


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- registry


def runs_root(cfg_dir: str = "") -> Path:
    """The parent of run directories: ``[run] dir`` if set, else the data dir's ``runs/``."""
    return Path(cfg_dir).expanduser() if cfg_dir else paths.runs_dir()


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-.")
    return slug[:48] or "demo"


def create_run(cfg: Any, *, root: Path | None = None, now: float | None = None) -> RunDir:
    """Make a fresh run directory for ``cfg`` (a RunConfig): config.toml, status ``queued``."""
    parent = root or runs_root(cfg.run.dir)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    base = f"{stamp}-{_slug(cfg.run.name or 'demo')}"
    for n in range(1, 1000):
        run_id = base if n == 1 else f"{base}-{n}"
        path = parent / run_id
        try:
            path.mkdir()
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - a thousand runs in one second
        raise WorkbenchError(f"cannot make a unique run directory under {parent}")
    run = RunDir(path)
    run.checkpoints_dir.mkdir()
    run.config_path.write_text(cfg.to_toml(), encoding="utf-8")
    run.metrics_path.touch()
    run.events_path.touch()
    total = cfg.train.steps
    run.write_status("queued", step=0, total_steps=total)
    run.append_event("state", state="queued", step=0)
    return run


def list_runs(root: Path | None = None) -> list[RunDir]:
    """Run directories under ``root`` (default: the runs dir), newest first.

    A symbolic link in a runs folder is never a run: the workbench does not follow links there
    (deleting "a run" must never delete what a link points at).
    """
    parent = root or runs_root()
    if not parent.is_dir():
        return []
    runs = [RunDir(p) for p in parent.iterdir()
            if not p.is_symlink() and p.is_dir() and (p / "config.toml").is_file()]
    return sorted(runs, key=lambda r: r.run_id, reverse=True)


class NoSuchRun(WorkbenchError):
    """No run has this id or id prefix (the engine answers 404)."""


class AmbiguousRun(WorkbenchError):
    """More than one run starts with this prefix (the engine answers 400)."""


class LinkedRun(WorkbenchError):
    """The id names a symbolic link in a runs folder: never followed (the engine answers 409)."""


def select_run(run_id: str, runs: list[RunDir], roots: list[Path]) -> RunDir:
    """The run ``run_id`` names among ``runs`` (the runs of ``roots``).

    An exact id, or a unique **prefix** of one; never a suffix (``delete ta`` must not find
    ``…-zeta``). A name that is a symbolic link in one of ``roots`` is refused in words.
    """
    exact = [r for r in runs if r.run_id == run_id]
    if exact:
        return exact[0]
    for root in roots:
        link = root / run_id
        if run_id and "/" not in run_id and link.is_symlink():
            raise LinkedRun(f"{link} is a symbolic link, not a run directory",
                            where=str(root),
                            hint="the workbench never follows links in a runs folder; remove the "
                                 "link yourself, or set [run] dir to the folder it points at")
    matches = [r for r in runs if run_id and r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NoSuchRun(f"no run {run_id!r}",
                        hint="give the run id or the start of it; list runs with `gemma-workbench runs`")
    names = ", ".join(r.run_id for r in matches[:5]) + (", …" if len(matches) > 5 else "")
    raise AmbiguousRun(f"run id {run_id!r} is ambiguous ({len(matches)} runs start with it: {names})",
                       hint="give more of the id")


def find_run(run_id: str, root: Path | None = None) -> RunDir:
    """A run by id, by a unique prefix of its id, or by path (a path that is a link is refused)."""
    as_path = Path(run_id).expanduser()
    if ("/" in run_id or run_id.startswith(".")) and as_path.is_symlink():
        raise LinkedRun(f"{as_path} is a symbolic link, not a run directory",
                        hint="give the run directory itself")
    if (as_path / "config.toml").is_file() and not as_path.is_symlink():
        return RunDir(as_path)
    parent = root or runs_root()
    return select_run(run_id, list_runs(parent), [parent])


def delete_run_dir(run: RunDir, roots: list[Path]) -> None:
    """Delete a run directory, and nothing else.

    Refused (``WorkbenchError``) unless ``run.path`` is a real directory (not a symbolic link)
    holding a ``config.toml``, directly inside one of ``roots``. ``shutil.rmtree`` removes
    links inside the run as links; it never deletes what they point at.
    """
    path = run.path
    if path.is_symlink():
        raise LinkedRun(f"{path} is a symbolic link, not a run directory",
                        hint="the workbench never deletes through a link; remove the link yourself")
    if not path.is_dir() or not (path / "config.toml").is_file():
        raise WorkbenchError(f"{path} is not a run directory (no config.toml)",
                             hint="nothing was deleted")
    parent = path.parent.resolve()
    if not any(parent == Path(r).resolve() for r in roots):
        raise WorkbenchError(f"{path} is not in a runs folder the workbench knows",
                             hint="nothing was deleted")
    try:
        shutil.rmtree(path)
    except OSError as e:
        raise WorkbenchError(f"could not delete {path}: {e.strerror or e}",
                             hint="check the folder's permissions; what remains is listed by "
                                  "`gemma-workbench runs`") from None


def mark_interrupted(root: Path | None = None) -> list[RunDir]:
    """Runs left in an active state by a process that died: mark them ``interrupted``.

    Call once at engine start, before any run is started.
    """
    marked = []
    for run in list_runs(root):
        if run.state in ACTIVE_STATES and run.state != "queued":
            run.set_state("interrupted", "the process running it stopped unexpectedly")
            marked.append(run)
    return marked


# --------------------------------------------------------------------------- tuned params


def list_checkpoints(run_dir: str | Path | RunDir) -> list[int]:
    """Steps with a complete checkpoint, ascending (reads the folder; no JAX or orbax)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    return checkpoint_steps(run.checkpoints_dir)


def checkpoint_steps(directory: str | Path) -> list[int]:
    """Complete checkpoints under an orbax folder: orbax writes a step to a temporary
    folder and renames it to the bare step number when every item is written."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p / "params").is_dir())


def load_tuned(run_dir: str | Path | RunDir, step: int | None = None):
    """``(cfg, LoadedModel, trainable, step)`` of a run's checkpoint (latest when ``step`` is None).

    ``trainable`` is the adapter tree for a LoRA run (merge it with ``loaded.params`` through
    ``lora.merge_lora`` and apply with ``lora.wrap(loaded.model, cfg.lora)``); for a full
    fine-tune (``cfg.lora.enabled = false``) it is the whole tuned params tree.
    """
    from adapters_lib.models.loader import load_model
    from adapters_lib.train import checkpoints

    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    if not run.exists():
        raise WorkbenchError(f"{run.path} is not a run directory (no config.toml)",
                             hint="pass a directory made by `gemma-workbench train`")
    cfg = run.config()
    steps = checkpoint_steps(run.checkpoints_dir)
    if not steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint yet", where=str(run.checkpoints_dir),
                             hint="wait for the first checkpoint (train.checkpoint_every) or resume it")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint at step {step}",
                             hint=f"checkpoints: {', '.join(map(str, steps))}")
    loaded = load_model(cfg.model, param_dtype=cfg.train.param_dtype)
    abstract = checkpoints.abstract_trainable(loaded, cfg)
    trainable = checkpoints.restore_params(run.checkpoints_dir, step, abstract)
    return cfg, loaded, trainable, step
