"""A GGUF file → a catalog entry, from its header alone (no tensor data is read).

Family, size, variant, quant type, bytes, params and status all come from the metadata
and the tensor table (``models.gguf.gguf_file``, ``models.gguf.gguf_arch``); the file name is never
trusted for the architecture. A truncated file, a shard missing from a split file, a
file without a vocabulary or of another architecture is listed with its one-line reason.
Headers are remembered by (path, size, mtime), per process and on disk
(``catalog.header_cache``): a rescan costs a ``stat`` per file.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path

from adapters_lib.catalog.entry import ModelEntry, name_guess, set_arch, vocab_mismatch
from adapters_lib.models.families import ArchError

log = logging.getLogger(__name__)

_LATER_SHARD = re.compile(r"-(\d{5})-of-\d{5}\.gguf$")
_IT = re.compile(r"(^|[-_/ .])(it|instruct|chat)([-_/ .]|$)", re.I)


def gguf_files(folder: Path) -> list[Path]:
    """The model ``*.gguf`` files directly in ``folder`` (first shards only, no projectors)."""
    try:
        files = sorted(p for p in folder.glob("*.gguf") if p.is_file())
    except OSError:
        return []
    out = []
    for p in files:
        m = _LATER_SHARD.search(p.name)
        if m and m.group(1) != "00001":
            continue
        if p.name.lower().startswith("mmproj"):  # a vision projector, not a language model
            continue
        out.append(p)
    return out


@functools.lru_cache(maxsize=128)
def _info(path: str, size: int, mtime_ns: int, logical_size: int | None):
    from adapters_lib.catalog import header_cache

    return header_cache.read_header(path, os.stat(path), logical_size)


def read_header(path: Path, logical_size: int | None = None):
    """``GGUFInfo`` of ``path`` (remembered while the file is unchanged: per process, and
    on disk by ``catalog.header_cache``)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return _info(real, st.st_size, st.st_mtime_ns, logical_size)


def gguf_entry(path: Path, *, entry_id: str, source: str, name: str = "",
               logical_size: int | None = None, shown_path: Path | None = None) -> ModelEntry:
    """The entry of one GGUF file. Never raises.

    ``name``: the store's name for it (Ollama tag, HF repo) — a hint for the variant only;
    ``logical_size``: ``path`` is the first part of a file that size (the starter chunks);
    ``shown_path``: the path to list (default ``path``).
    """
    from adapters_lib.models.gguf import GGUFError

    shown = shown_path or path
    entry = ModelEntry(id=entry_id, format="gguf", path=str(shown), source=source,
                       checkpoint=str(shown))
    try:
        entry.bytes = logical_size or path.stat().st_size
        info = read_header(path, logical_size)
    except GGUFError as e:
        name_guess(entry, name or path.name)
        entry.variant = "it" if _IT.search(name or path.name) else "pt"
        return entry.fail(e.status, f"{e.reason}" if "truncated" not in e.reason else
                          f"{e.reason}; the download was interrupted or the file was cut")
    except OSError as e:
        return entry.fail("unreadable", f"cannot read {path}: {e.strerror}")
    try:
        _fill(entry, info, name or path.name)
    except Exception as e:  # a bug or an unforeseen file: list it, never crash the listing
        log.debug("inspecting %s failed", path, exc_info=True)
        entry.fail("unreadable", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return entry


def _fill(entry: ModelEntry, info, name_hint: str) -> None:
    from adapters_lib.models.gguf import gguf_arch

    entry.bytes = info.bytes
    entry.quant = info.quant
    entry.params = info.param_count()
    entry.family = gguf_arch.family_of(info)
    entry.tokenizer_pieces = info.vocab_size
    meta_name = " ".join(str(info.get(k) or "") for k in
                         ("general.finetune", "general.name", "general.basename"))
    entry.variant = "it" if _IT.search(meta_name) or \
        (not meta_name.strip() and _IT.search(name_hint)) else "pt"
    embed = info.tensors.get("token_embd.weight")
    entry.vocab_rows = embed.shape[0] if embed is not None and embed.shape else None
    try:
        arch = gguf_arch.arch_from_gguf(info)
        set_arch(entry, arch)
        if arch.family in ("gemma3n", "gemma4"):  # the model's own: no rope_freqs, no padded rows
            entry.params = arch.param_count()
    except ArchError as e:
        if e.family != "other":
            entry.family = e.family
        label = str(info.get("general.size_label") or "").lower()
        if label and re.fullmatch(r"\d+(\.\d+)?[mb]", label):
            entry.size = label
        entry.fail(e.status, e.reason)
        return
    kind = info.get("tokenizer.ggml.model")
    if info.vocab_size is None:
        entry.fail("incomplete", "the GGUF holds no tokenizer vocabulary (tokenizer.ggml.tokens); "
                                 "set [model] tokenizer to the model's tokenizer.model")
    elif kind not in ("llama", "gemma4"):
        entry.fail("unsupported", f"the GGUF's tokenizer is {kind!r}, not SentencePiece "
                                  "('llama'; Gemma 4: 'gemma4'), which Gemma uses")
    pieces = entry.tokenizer_pieces
    if getattr(arch, "hf_rows", None) == pieces:  # Gemma 3n: padded to HF's multimodal rows
        pieces = arch.vocab_size
    entry.tokenizer_mismatch = vocab_mismatch(entry.vocab_rows, pieces)
    cached = cached_tokenizer(Path(entry.path))
    entry.tokenizer = str(cached) if cached else None
    if entry.status == "ok":
        entry.note = f"{info.quant} GGUF; tokenizer rebuilt from its vocabulary" + \
            ("" if cached else " at first use")


def cached_tokenizer(path: Path) -> Path | None:
    """The rebuilt tokenizer of a GGUF if it exists and the file's hash comes free."""
    from adapters_lib.models.gguf import gguf_tokenizer

    sha = gguf_tokenizer.known_sha256(path)
    if sha is None:
        return None
    target = gguf_tokenizer.tokenizer_path_for(sha)
    return target if target.is_file() else None


def ensure_tokenizer(entry: ModelEntry) -> ModelEntry:
    """Fill ``entry.tokenizer`` of an ok GGUF entry with the rebuilt tokenizer (built once)."""
    if entry.format != "gguf" or entry.status != "ok" or entry.tokenizer:
        return entry
    from adapters_lib.models import starter
    from adapters_lib.models.gguf import tokenizer_for_gguf

    path = starter.ensure_starter() if entry.source == "starter" else Path(entry.path)
    entry.tokenizer = str(tokenizer_for_gguf(path))
    return entry
