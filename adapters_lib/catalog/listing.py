"""The whole catalog (``list_models``) and one entry for ``[model] source`` (``resolve``)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from adapters_lib import paths
from adapters_lib.catalog.caches import scan_hf, scan_kaggle
from adapters_lib.catalog.entry import ModelEntry
from adapters_lib.catalog.folders import inspect_dir, scan_folder
from adapters_lib.catalog.gguf_entries import ensure_tokenizer, gguf_entry
from adapters_lib.catalog.locations import (
    configured_folders,
    hf_cache_dir,
    kaggle_cache_dir,
    lmstudio_models_dirs,
    ollama_models_dir,
)
from adapters_lib.catalog.stores import lmstudio_entries, ollama_entries, starter_entries
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families


class NoWeightsFound(WorkbenchError):
    """A ``[model] source`` folder that holds no weights in any format the catalog knows
    (a route that reads fewer formats names its own needs instead)."""


def store_entries() -> list[ModelEntry]:
    """Ollama's and LM Studio's models."""
    entries = ollama_entries(ollama_models_dir())
    for root in lmstudio_models_dirs():
        entries += lmstudio_entries(root)
    return entries


def list_models(paths: tuple[str | Path, ...] | list[str | Path] = (), *,
                include_demo: bool = True) -> list[ModelEntry]:
    """Every model found: demo, starter, kagglehub cache, HF cache, Ollama, LM Studio,
    configured folders, ``paths`` (the first listing of a file wins)."""
    entries: list[ModelEntry] = [demo_entry()] if include_demo else []
    entries += starter_entries()
    entries += scan_kaggle(kaggle_cache_dir())
    entries += scan_hf(hf_cache_dir())
    entries += store_entries()
    for folder in configured_folders():
        entries += scan_folder(folder, missing_ok=True)
    for folder in paths:
        entries += scan_folder(Path(folder).expanduser())
    seen: set[str] = set()
    unique = []
    for entry in entries:
        key = os.path.realpath(entry.path) if entry.path else entry.id
        if key in seen:
            continue
        seen.add(key)
        unique.append(entry)
    return unique


def resolve(source: str, paths: tuple[str | Path, ...] = ()) -> ModelEntry:
    """The entry for ``[model] source``: "demo", a catalog id, or a path to weights.

    A GGUF entry that is ok comes back with its rebuilt tokenizer (built at first use).
    """
    return ensure_tokenizer(_find(source, paths))


def find(source: str, paths: tuple[str | Path, ...] = ()) -> ModelEntry:
    """``resolve`` without building a GGUF's tokenizer: metadata only, for a check before a
    run exists (``WorkbenchError`` at ``[model] source`` when nothing answers to it)."""
    return _find(source, paths)


def _find(source: str, paths: tuple[str | Path, ...]) -> ModelEntry:
    from adapters_lib.models import starter

    if source == "demo":
        return demo_entry()
    if source == starter.ENTRY_ID or source in starter.ALIASES:
        found = starter_entries()
        if found:
            return found[0]
    path = Path(source.removeprefix("local:")).expanduser()
    if path.exists():  # a relative path is relative to the current directory; entries hold it absolute
        return _by_path(Path(os.path.abspath(path)))
    if source.startswith(("ollama:", "lmstudio:")):
        entries = store_entries()
    else:
        entries = list_models(paths)
    for entry in entries:
        if entry.id == source:
            return entry
    bare = [e for e in entries if e.id.split(":", 1)[-1] == source]
    if len(bare) == 1:
        return bare[0]
    if source.startswith(("ollama:", "lmstudio:")):
        entries = list_models(paths)
    ids = [e.id for e in entries]
    close = difflib.get_close_matches(source, ids, n=1, cutoff=0.4)
    hint = f"did you mean {close[0]!r}?" if close else "run `gemma-workbench models` to see the ids"
    raise WorkbenchError(f"no model {source!r} in the catalog and no such path",
                         where="[model] source", hint=hint)


def _by_path(path: Path) -> ModelEntry:
    real = os.path.realpath(path)
    stores = [(kaggle_cache_dir(), lambda: scan_kaggle(kaggle_cache_dir())),
              (hf_cache_dir(), lambda: scan_hf(hf_cache_dir())),
              (ollama_models_dir(), lambda: ollama_entries(ollama_models_dir()))]
    stores += [(root, lambda r=root: lmstudio_entries(r)) for root in lmstudio_models_dirs()]
    for root, scan in stores:
        if real.startswith(os.path.realpath(root) + os.sep):
            # inside a store: its view knows completion markers, manifests and partial blobs
            for entry in scan():
                if entry.path and os.path.realpath(entry.path) == real:
                    return entry
    if path.is_file():
        from adapters_lib.models.gguf import is_gguf

        if is_gguf(path):
            return gguf_entry(path, entry_id=f"local:{path.resolve()}", source="folder")
        raise WorkbenchError(f"{path} is a file but not a GGUF", where="[model] source",
                             hint="point at a .gguf file or a folder holding weights")
    entry = inspect_dir(path, entry_id=f"local:{path.resolve()}", source="folder")
    if entry is None:
        found = scan_folder(path, depth=0)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise WorkbenchError(f"{path} holds {len(found)} GGUF files", where="[model] source",
                                 hint="name one of them: " + ", ".join(
                                     Path(e.path).name for e in found[:3]))
        raise NoWeightsFound(f"no Gemma weights found in {path}", where="[model] source",
                             hint="point at a folder with an orbax checkpoint, "
                                  "*.safetensors + config.json, a Keras preset or a .gguf file")
    return entry


def demo_entry() -> ModelEntry:
    from adapters_lib.models import demo  # light: no jax at import

    arch = families.KNOWN[("gemma3", "custom")][1]
    tok = next(iter(sorted(paths.demo_dir().glob("demo-tokenizer-*.model"))), None) \
        if paths.demo_dir().is_dir() else None
    return ModelEntry(id="demo", family="gemma3", size="custom", variant="pt", format="demo",
                      path="", tokenizer=str(tok) if tok else None, bytes=0,
                      params=arch.param_count(), source="builtin", arch=arch,
                      vocab_rows=arch.vocab_size,
                      reason=f"built-in tiny Gemma 3 (vocab {demo.DEMO_VOCAB}); "
                             "tokenizer made at first use")
