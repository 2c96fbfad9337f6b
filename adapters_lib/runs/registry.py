"""The one run registry: every run under every run root, found the same way by every caller.

Roots are the data dir's ``runs/`` (or the registry's ``default_root``) plus every ``[run] dir``
a run was ever created in, remembered in ``<state dir>/run-roots.json``. The engine, the CLI
(``train --resume``, ``sample``/``compare --run``, ``export``) and the TUI all look runs up
through ``Registry``, so one sees what the other sees.

A run is named by its exact id or a unique **prefix** of it, never a suffix. A symbolic
link in a runs folder is never a run: it is not listed, naming it is refused in words, and
nothing is ever deleted through one.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import files
from adapters_lib.runs.rundir import RunDir


class NoSuchRun(WorkbenchError):
    """No run has this id or id prefix (the engine answers 404)."""


class AmbiguousRun(WorkbenchError):
    """More than one run starts with this prefix (the engine answers 400)."""


class LinkedRun(WorkbenchError):
    """The id names a symbolic link in a runs folder: never followed (the engine answers 409)."""


def runs_root(cfg_dir: str = "") -> Path:
    """The parent of run directories: ``[run] dir`` if set, else the data dir's ``runs/``."""
    return Path(cfg_dir).expanduser() if cfg_dir else paths.runs_dir()


def roots_file() -> Path:
    return paths.state_dir() / "run-roots.json"


def remembered_roots() -> list[Path]:
    data = files.read_json(roots_file())
    if not isinstance(data, list):
        return []
    return [Path(p) for p in data if isinstance(p, str)]


def remember_root(root: Path) -> None:
    """Add ``root`` to the roots file (once), so every registry lists its runs."""
    if root.resolve() == paths.runs_dir().resolve():
        return
    if str(root.resolve()) in {str(p) for p in remembered_roots()}:
        return
    paths.ensure_private_dir(paths.state_dir())
    with files.dir_lock(paths.state_dir()):  # another process may add its root meanwhile
        roots = [str(p) for p in remembered_roots()]
        if str(root.resolve()) not in roots:
            roots.append(str(root.resolve()))
            files.write_json_atomic(roots_file(), roots)


def _slug(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-.")
    return slug[:48] or "demo"


GENERIC_STEMS = frozenset({"model", "weights", "checkpoint", "params", "train", "data",
                           "dataset", "eval", "test", "valid", "validation", "dev", "all"})
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin", ".keras", ".h5", ".npz")
DATA_SUFFIXES = (".jsonl", ".json", ".txt", ".csv", ".parquet", ".md")


def _short(ref: str, suffixes: tuple[str, ...]) -> str:
    """The telling part of a catalog id or path: ``hf:google/gemma-3-1b-it`` → ``gemma-3-1b-it``,
    ``…/answer-format/train.jsonl`` → ``answer-format`` (a generic file name gives its folder)."""
    rest = ref.strip().rstrip("/")
    if ":" in rest and not rest.startswith(("/", ".", "~")) and rest.split(":", 1)[0].isalpha():
        rest = rest.split(":", 1)[1]
    parts = [p for p in re.split(r"[/\\]", rest) if p]
    if not parts:
        return ""
    last = parts[-1]
    for suffix in suffixes:
        if last.lower().endswith(suffix):
            last = last[: -len(suffix)]
            break
    if last.lower() in GENERIC_STEMS and len(parts) > 1:
        last = parts[-2]
    return last


def short_ref(model_source: str) -> str:
    """A model's short name: ``starter:gemma-3-270m`` → ``gemma-3-270m``."""
    return _short(model_source, WEIGHT_SUFFIXES)


def default_name(model_source: str, data_path: str) -> str:
    """A run's name when ``[run] name`` is empty: its model and its data
    (``gemma-3-270m-answer-format``; the demo model on the demo tasks is ``demo``)."""
    model = short_ref(model_source) or "model"
    data = "demo-tasks" if data_path.strip() in ("", "demo") else _short(data_path, DATA_SUFFIXES)
    if model == "demo" and data == "demo-tasks":
        return "demo"
    return _slug(f"{model}-{data or 'data'}")


def create_run(cfg: Any, *, root: Path | None = None, now: float | None = None,
               others: Sequence[Path] = ()) -> RunDir:
    """Make a fresh run directory for ``cfg`` (a RunConfig): config.toml, status ``queued``.

    The calling process becomes the run's owner (``owner.json``, a ``queued`` lease) before
    status.json exists, so no reconciler takes the new run for an orphan. The id is unique in
    ``root`` and among the runs of ``others`` (the registry's other roots): two runs made in
    one second under two folders would otherwise share an id, and a command naming it would
    find the other one.
    """
    from adapters_lib.runs import lease

    parent = root or runs_root(cfg.run.dir)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WorkbenchError(f"cannot create the runs folder {parent}: {e.strerror or e}",
                             where="[run] dir" if cfg.run.dir else None,
                             hint="choose a folder you can write ([run] dir)") from None
    if cfg.run.dir or root is not None:
        with contextlib.suppress(OSError):  # a read-only state dir must not stop a run
            remember_root(parent)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    name = cfg.run.name or default_name(cfg.model.source, cfg.data.path)
    base = f"{stamp}-{_slug(name)}"
    for n in range(1, 1000):
        run_id = base if n == 1 else f"{base}-{n}"
        path = parent / run_id
        if any(_exists(other / run_id) for other in others):
            continue
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as e:  # a read-only or special folder (/proc): one line, not a traceback
            raise WorkbenchError(f"cannot create a run directory in {parent}: {e.strerror or e}",
                                 where="[run] dir" if cfg.run.dir else str(parent),
                                 hint="choose a folder you can write ([run] dir)") from None
        break
    else:  # pragma: no cover - a thousand runs in one second
        raise WorkbenchError(f"cannot make a unique run directory under {parent}")
    run = RunDir(path)
    try:
        lease.claim(run, kind="queued")
        run.checkpoints_dir.mkdir()
        run.config_path.write_text(cfg.to_toml(), encoding="utf-8")
        run.metrics_path.touch()
        run.events_path.touch()
        run.write_status("queued", step=0, total_steps=cfg.train.steps)
        run.append_event("state", state="queued", step=0)
        files.fsync_dir(parent)
    except OSError as e:  # a full disk, a read-only folder: no half-made run is left behind
        shutil.rmtree(path, ignore_errors=True)
        raise WorkbenchError(f"cannot create a run directory in {parent}: {e.strerror or e}",
                             where="[run] dir" if cfg.run.dir else str(parent),
                             hint="free some space or choose another folder ([run] dir)") from None
    return run


def list_runs(root: Path | None = None) -> list[RunDir]:
    """Run directories under one ``root`` (default: the runs dir), newest first.

    A symbolic link in a runs folder is never a run: the workbench does not follow links there
    (deleting "a run" must never delete what a link points at).
    """
    parent = root or runs_root()
    try:
        entries = list(parent.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    runs = [RunDir(p) for p in entries
            if not p.is_symlink() and p.is_dir() and (p / "config.toml").is_file()]
    return sorted(runs, key=lambda r: r.run_id, reverse=True)


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except (OSError, ValueError):
        return False


def _is_link(path: Path) -> bool:
    try:
        return path.is_symlink()
    except (OSError, ValueError):  # not a name a run could have (too long, a NUL byte)
        return False


def short_id(run_id: str) -> str:
    """``YYYYmmdd-HHMMSS-name`` without its date (the time and name tell runs apart): how the
    TUI shows a run, and a start that names one as well as the id's own."""
    head, _, rest = run_id.partition("-")
    return rest if head.isdigit() and len(head) == 8 and rest else run_id


def select_run(run_id: str, runs: list[RunDir], roots: list[Path]) -> RunDir:
    """The run ``run_id`` names among ``runs`` (the runs of ``roots``).

    An exact id, or a unique **prefix** of one or of its ``short_id`` (the time on: what the
    Train screen shows); never a suffix (``delete ta`` must not find ``…-zeta``). A name that
    is a symbolic link in one of ``roots`` is refused in words.
    """
    exact = [r for r in runs if r.run_id == run_id]
    if exact:
        return exact[0]
    for root in roots:
        link = root / run_id
        if run_id and "/" not in run_id and _is_link(link):
            raise LinkedRun(f"{link} is a symbolic link, not a run directory",
                            where=str(root),
                            hint="the workbench never follows links in a runs folder; remove the "
                                 "link yourself, or set [run] dir to the folder it points at")
    matches = [r for r in runs if run_id and r.run_id.startswith(run_id)]
    if not matches and run_id[:6].isdigit():  # the time on, as shown: never the name alone
        matches = [r for r in runs if short_id(r.run_id).startswith(run_id) and short_id(r.run_id) != r.run_id]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise NoSuchRun(f"no run {shown!r}",
                        hint="give the run id or the start of it (with or without its date); list runs "
                             "with `gemma-workbench runs`")
    names = ", ".join(r.run_id for r in matches[:5]) + (", …" if len(matches) > 5 else "")
    raise AmbiguousRun(f"run id {run_id!r} is ambiguous ({len(matches)} runs start with it: {names})",
                       hint="give more of the id")


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


class Registry:
    """Every run of every root: ``all``, ``find``, ``create``, ``checkpoints``,
    ``latest_complete``, ``delete``.

    ``default_root`` replaces the data dir's ``runs/`` (tests, an engine started with one);
    ``remembered=False`` looks at that root alone.
    """

    def __init__(self, default_root: Path | None = None, *, remembered: bool = True):
        self.default_root = Path(default_root) if default_root is not None else None
        self.remembered = remembered

    def roots(self) -> list[Path]:
        out: list[Path] = []
        seen: set[Path] = set()
        for root in [self.default_root or runs_root(),
                     *(remembered_roots() if self.remembered else [])]:
            key = root.resolve() if root.exists() else root
            if key not in seen:
                seen.add(key)
                out.append(root)
        return out

    def all(self) -> list[RunDir]:
        """Every run of every root, newest first (a run reached twice is listed once)."""
        found: dict[Path, RunDir] = {}
        for root in self.roots():
            for run in list_runs(root):
                found.setdefault(run.path.resolve(), run)
        return sorted(found.values(), key=lambda r: r.run_id, reverse=True)

    def find(self, run_id: str, *, allow_path: bool = False) -> RunDir:
        """The run named by ``run_id`` (exact id or unique prefix; with ``allow_path`` a run
        folder's path too). Raises ``NoSuchRun``, ``AmbiguousRun`` or ``LinkedRun``."""
        if allow_path and ("/" in run_id or run_id.startswith((".", "~"))):
            as_path = Path(run_id).expanduser()
            if as_path.is_symlink():
                raise LinkedRun(f"{as_path} is a symbolic link, not a run directory",
                                hint="give the run directory itself")
            if (as_path / "config.toml").is_file():
                return RunDir(as_path)
            raise NoSuchRun(f"{as_path} is not a run directory (no config.toml)",
                            hint="give a run id, or the folder `gemma-workbench train` printed")
        return select_run(run_id, self.all(), self.roots())

    def create(self, cfg: Any, *, now: float | None = None) -> RunDir:
        root = runs_root(cfg.run.dir) if cfg.run.dir else (self.default_root or runs_root())
        return create_run(cfg, root=root, now=now, others=self.roots())

    def delete(self, run: RunDir) -> None:
        delete_run_dir(run, self.roots())


def find_run(run_id: str, root: Path | None = None) -> RunDir:
    """A run by id, unique id prefix, or path: in ``root`` alone if given, else in every root."""
    registry = Registry(root, remembered=root is None)
    return registry.find(run_id, allow_path=True)
