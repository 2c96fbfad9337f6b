"""The run config's paths, made absolute before anything reaches the engine.

Paths (``[model] source`` when it is a path, ``tokenizer``, ``[data] path``, ``eval_path``,
``[run] dir``): a value from the config file resolves against the file's folder, a ``--set``
value against the current directory, ``~`` is expanded. Where neither folder is known (the
engine, any API client) a relative path is refused: the engine's working directory is not
the user's. Used by ``adapters_lib.config``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from adapters_lib.config.checks import DATA_KEYS, PATH_KEYS, Where
from adapters_lib.errors import WorkbenchError


def _looks_like_path(source: str) -> bool:
    return source.startswith(("/", "~", "./", "../")) or source in (".", "..")


def resolve_path(value: str, base: Path | None, *, key: str, where: str) -> str:
    """``value`` made absolute: ``~`` expanded, relative to ``base`` (None: refused)."""
    try:
        p = Path(value).expanduser()
    except RuntimeError:  # ~user with no such user
        raise WorkbenchError(f"{key} {value!r}: cannot expand {value.split('/')[0]!r} "
                             "(no such user)", where=where) from None
    if not p.is_absolute():
        if base is None:
            raise WorkbenchError(
                f"{key} {value!r} is a relative path, and it is not known what it is "
                "relative to here", where=where,
                hint="give an absolute path (the CLI and the TUI resolve a config file's "
                     "paths against its folder)")
        p = base / p
    return str(p.resolve())


DATASET_PREFIXES = ("hf:", "tfds:")
"""``data.path``/``eval_path`` values that name a dataset in a cache, not a file
(``adapters_lib.data.sources``): parsed here, never resolved as paths, except the folder of
``hf:/a/folder`` (a ``save_to_disk`` folder), which resolves like any path."""


def _resolve_dataset_ref(value: str, base: Path | None, *, key: str, where: str) -> str:
    from adapters_lib.dataset_refs import parse_ref  # stdlib only

    ref = parse_ref(value, where=where)
    if ref.scheme == "hf" and _looks_like_path(ref.name):
        folder = resolve_path(ref.name, base, key=key, where=where)
        return f"hf:{folder}" + (f"@{ref.split}" if ref.split else "")
    return value


def resolve_paths(cfg: Any, where: Where, *, base_dir: Path | None,
                  overrides_dir: Path | None) -> Any:
    """``cfg`` with every path key absolute (see the module doc)."""
    def base_of(section: str, key: str) -> Path | None:
        return overrides_dir if (section, key) in where.overrides else base_dir

    changed: dict[str, dict[str, str]] = {}
    for section, key in PATH_KEYS:
        value = getattr(getattr(cfg, section), key)
        if not value or (section, key) in DATA_KEYS[:2] and value == "demo":
            continue
        if (section, key) in DATA_KEYS and value.startswith(DATASET_PREFIXES):
            resolved = _resolve_dataset_ref(value, base_of(section, key), key=f"{section}.{key}",
                                            where=where(section, key))
            if resolved != value:
                changed.setdefault(section, {})[key] = resolved
            continue
        changed.setdefault(section, {})[key] = resolve_path(
            value, base_of(section, key), key=f"{section}.{key}", where=where(section, key))
    source = cfg.model.source
    if source != "demo":
        bare = source.removeprefix("local:")
        base = base_of("model", "source")
        explicit = source.startswith("local:") or _looks_like_path(bare)
        if explicit or (base is not None and (base / bare).exists()):
            path = resolve_path(bare, base, key="model.source", where=where("model", "source"))
            changed.setdefault("model", {})["source"] = ("local:" if bare != source else "") + path
    run_dir = changed.get("run", {}).get("dir")
    if run_dir and os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise WorkbenchError(f"run.dir {run_dir!r} is a file; it must be a folder (made when "
                             "missing)", where=where("run", "dir"),
                             hint="name a folder for the run directories, or leave it empty")
    sections = {name: dataclasses.replace(getattr(cfg, name), **values)
                for name, values in changed.items()}
    return dataclasses.replace(cfg, **sections) if sections else cfg


def cwd() -> Path | None:
    """The current directory, or None when it was deleted under this process."""
    try:
        return Path(os.getcwd())
    except OSError:
        return None
