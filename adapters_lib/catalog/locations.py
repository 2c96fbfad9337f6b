"""Where the catalog looks: caches and stores (environment variables first), user folders."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError


def kaggle_cache_dir() -> Path:
    return Path(os.environ.get("KAGGLEHUB_CACHE") or "~/.cache/kagglehub").expanduser()


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def ollama_models_dir() -> Path:
    """Ollama's store: ``$OLLAMA_MODELS`` or ``~/.ollama/models`` (manifests/ and blobs/)."""
    return Path(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models").expanduser()


def lmstudio_models_dirs() -> list[Path]:
    """LM Studio's model folders: ``$LMSTUDIO_MODELS`` alone when set, else the
    ``downloadsFolder`` of its settings, ``~/.lmstudio/models`` (0.3+) and
    ``~/.cache/lm-studio/models`` (older)."""
    if os.environ.get("LMSTUDIO_MODELS"):
        return [Path(os.environ["LMSTUDIO_MODELS"]).expanduser()]
    found: list[Path] = []
    settings = Path("~/.lmstudio/settings.json").expanduser()
    try:
        folder = json.loads(settings.read_text()).get("downloadsFolder")
        if isinstance(folder, str) and folder:
            found.append(Path(folder).expanduser())
    except (OSError, ValueError, AttributeError):
        pass
    found += [Path("~/.lmstudio/models").expanduser(),
              Path("~/.cache/lm-studio/models").expanduser()]
    unique: list[Path] = []
    for f in found:
        if f not in unique:
            unique.append(f)
    return unique


def user_config_file() -> Path:
    return paths.config_dir() / "models.toml"


def configured_folders() -> list[Path]:
    """``folders = [...]`` from ``<config dir>/models.toml`` (absent file: none); a relative
    folder is relative to the folder of models.toml."""
    file = user_config_file()
    if not file.is_file():
        return []
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise WorkbenchError(f"cannot read the model folders list: {e}", where=str(file),
                             hint='write folders = ["/path/to/models", ...]') from None
    folders = data.get("folders", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise WorkbenchError("folders must be a list of paths", where=f"{file}: folders",
                             hint='write folders = ["/path/to/models", ...]')
    # a relative folder is relative to models.toml's own folder, as a config file's paths are
    return [file.parent / Path(f).expanduser() for f in folders]
