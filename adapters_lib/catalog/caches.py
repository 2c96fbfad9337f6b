"""The download caches: kagglehub (``models/<owner>/<model>/<framework>/<variation>/<version>/``,
finished when kagglehub's ``<variation>/<version>.complete`` marker exists; kagglehub 1.0.3,
``cache.py``) and the Hugging Face hub cache (``huggingface_hub.scan_cache_dir``), whose
snapshots hold model folders and ``*.gguf`` files (one entry per GGUF file)."""

from __future__ import annotations

import logging
from pathlib import Path

from adapters_lib.catalog.entry import ModelEntry, name_guess
from adapters_lib.catalog.folders import inspect_dir
from adapters_lib.catalog.gguf_entries import gguf_entry, gguf_files

log = logging.getLogger(__name__)

KAGGLE_FRAMEWORKS = {"flax": "flax-orbax", "jax": "flax-orbax", "keras": "keras-preset",
                     "transformers": "hf-safetensors"}


def scan_kaggle(cache: Path) -> list[ModelEntry]:
    root = cache / "models"
    if not root.is_dir():
        return []
    entries = []
    for variation in sorted(root.glob("*/*/*/*")):
        if not variation.is_dir():
            continue
        owner, model, framework = variation.parts[-4:-1]
        versions = {p.name for p in variation.iterdir() if p.is_dir() and p.name.isdigit()}
        versions |= {p.name[: -len(".archive")] for p in variation.glob("*.archive")}
        for version in sorted(versions, key=int):
            entries.append(_kaggle_entry(variation, owner, model, framework, version))
    return entries


def _kaggle_entry(variation: Path, owner: str, model: str, framework: str,
                  version: str) -> ModelEntry:
    folder = variation / version
    entry_id = f"kaggle:{owner}/{model}/{framework}/{variation.name}/{version}"
    hint_name = f"{model} {variation.name}"
    complete = (variation / f"{version}.complete").is_file()
    entry = None
    if folder.is_dir():
        entry = inspect_dir(folder, entry_id=entry_id, source="kaggle", name=hint_name,
                            fmt=KAGGLE_FRAMEWORKS.get(framework))
    if entry is None:
        entry = ModelEntry(id=entry_id, format=KAGGLE_FRAMEWORKS.get(framework, "flax-orbax"),
                           path=str(folder), source="kaggle")
        name_guess(entry, hint_name)
        if complete:
            entry.fail("unreadable", f"no weights in {folder} ({framework} framework)")
    if not complete:
        entry.status = "incomplete"
        entry.reason = (f"download not finished: kagglehub's completion marker "
                        f"{variation.name}/{version}.complete is missing")
    return entry


def scan_hf(cache: Path) -> list[ModelEntry]:
    if not cache.is_dir():
        return []
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return []
    except (OSError, ValueError) as e:
        log.warning("cannot scan the Hugging Face cache %s: %s", cache, e)
        return []
    entries = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        partial = any((Path(repo.repo_path) / "blobs").glob("*.incomplete"))
        for rev in sorted(repo.revisions, key=lambda r: (("main" not in r.refs), r.commit_hash)):
            entry_id = f"hf:{repo.repo_id}" if "main" in rev.refs else \
                f"hf:{repo.repo_id}@{rev.commit_hash[:8]}"
            snapshot = Path(rev.snapshot_path)
            ggufs = _snapshot_ggufs(snapshot)
            for f in ggufs:
                rel = f.relative_to(snapshot).as_posix()
                entries.append(gguf_entry(f, entry_id=f"{entry_id}/{rel}", source="huggingface",
                                          name=f"{repo.repo_id}/{rel}"))
            entry = inspect_dir(snapshot, entry_id=entry_id, source="huggingface",
                                name=repo.repo_id, fmt="hf-safetensors")
            if entry is None and ggufs:
                continue
            if entry is None:
                entry = ModelEntry(id=entry_id, format="hf-safetensors",
                                   path=str(rev.snapshot_path), source="huggingface")
                name_guess(entry, repo.repo_id)
                entry.fail("incomplete" if partial else "unreadable",
                           "no config.json / *.safetensors / *.gguf in the snapshot"
                           + (" (download in progress or interrupted)" if partial else ""))
            elif partial and entry.status != "ok":
                entry.reason += " (a download is in progress or was interrupted)"
            entries.append(entry)
    return entries


def _snapshot_ggufs(snapshot: Path) -> list[Path]:
    """GGUF files at the top of a snapshot and one folder down (repos group quants so)."""
    found = gguf_files(snapshot)
    try:
        subs = sorted(p for p in snapshot.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for sub in subs:
        found += gguf_files(sub)
    return found
