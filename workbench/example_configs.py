"""The example run configs shipped beside the code (``examples/*.toml``), found by model.

Configure suggests a model's example when it is picked without data of its own: the
example names its model in ``[model] source`` and brings data made for it
(``examples/real-270m.toml``: the starter 270M and its answer-format set).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import workbench


def example_folders() -> list[Path]:
    """``./examples`` (a checkout's root, where ``make run`` starts), then the one beside the
    package (an editable install)."""
    here = Path.cwd() / "examples"
    beside = Path(workbench.__file__).resolve().parent.parent / "examples"
    return [f for f in dict.fromkeys((here, beside)) if f.is_dir()]


def example_for(source: str) -> Path | None:
    """The example config whose ``[model] source`` is ``source`` (never the demo's): one that
    fine-tunes (the default objective) before one that trains another objective (DPO)."""
    if source.strip() in ("", "demo"):
        return None
    for folder in example_folders():
        found = []
        for path in sorted(folder.glob("*.toml")):
            try:
                config = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
            if str((config.get("model") or {}).get("source", "")).strip() == source.strip():
                objective = str((config.get("train") or {}).get("objective", "sft"))
                found.append((objective != "sft", path.name, path))
        if found:
            return min(found)[2]
    return None


def shown_path(path: Path) -> str:
    """``examples/real-270m.toml`` under the current directory, else the absolute path."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
