"""One model folder (orbax, HF safetensors, Keras preset) or GGUF file → an entry; and folders
holding models (``scan_folder``: model folders and ``*.gguf`` files, two levels deep)."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from adapters_lib import paths
from adapters_lib.catalog.entry import ModelEntry, name_guess, set_arch, vocab_mismatch
from adapters_lib.catalog.gguf_entries import gguf_entry, gguf_files
from adapters_lib.catalog.keras_preset import inspect_keras
from adapters_lib.catalog.orbax_meta import orbax_shapes, read_json
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from adapters_lib.models.families import ArchError, gemma3n, gemma4

log = logging.getLogger(__name__)

TOKENIZER_NAMES = ("tokenizer.model",)


def scan_folder(folder: Path, *, missing_ok: bool = False, depth: int = 2) -> list[ModelEntry]:
    """A model folder, a GGUF file, or a folder holding them (``depth`` levels deep)."""
    paths.exists(folder, where="--path", hint="name a folder holding model weights or .gguf files")
    if folder.is_file() and folder.suffix == ".gguf":
        return [gguf_entry(folder, entry_id=f"local:{folder.resolve()}", source="folder")]
    if not folder.is_dir():
        if missing_ok:
            log.warning("model folder %s does not exist", folder)
            return []
        raise WorkbenchError(f"{folder} is not a folder", where="--path",
                             hint="name a folder holding model weights or .gguf files")
    entry = inspect_dir(folder, entry_id=f"local:{folder.resolve()}", source="folder")
    if entry is not None:
        return [entry]
    entries: list[ModelEntry] = [gguf_entry(f, entry_id=f"local:{f.resolve()}", source="folder")
                                 for f in gguf_files(folder)]
    if depth == 0:
        return entries
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        entries += scan_folder(child, missing_ok=True, depth=depth - 1)
    return entries


def detect_format(folder: Path) -> tuple[str, Path] | None:
    """(format, weights dir) of a model folder, or None when it holds no weights."""
    config = folder / "config.json"
    if (folder / "metadata.json").is_file() or (folder / "model.weights.h5").is_file() \
            or (folder / "model.weights.json").is_file():
        return "keras-preset", folder
    if config.is_file() and '"keras_hub' in _head(config):
        return "keras-preset", folder
    if (folder / "adapter_config.json").is_file():  # a PEFT adapter (an `export`): no base weights
        return None
    if any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").exists():
        return "hf-safetensors", folder
    if _is_orbax(folder):
        return "flax-orbax", folder
    # kagglehub's <version>/ holds its checkpoint in one <variation>/ sub-folder; a folder
    # holding that and more (GGUF files, other folders) is a folder of models, not one model
    subs = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")] \
        if folder.is_dir() else []
    if len(subs) == 1 and _is_orbax(subs[0]) and not gguf_files(folder):
        return "flax-orbax", subs[0]
    if config.is_file() and not gguf_files(folder):
        return "hf-safetensors", folder
    return None


def _is_orbax(folder: Path) -> bool:
    """Orbax's marker files (files: a sub-folder named ``checkpoint`` marks nothing)."""
    return any((folder / n).is_file() for n in ("_METADATA", "manifest.ocdbt",
                                                "_CHECKPOINT_METADATA", "checkpoint"))


def _head(path: Path, n: int = 4096) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read(n)
    except OSError:
        return ""


def inspect_dir(folder: Path, *, entry_id: str, source: str, name: str = "",
                fmt: str | None = None) -> ModelEntry | None:
    """The entry for one model folder (None if it holds no weights). Never raises."""
    try:
        found = detect_format(folder)
    except OSError as e:
        return ModelEntry(id=entry_id, path=str(folder), source=source, format=fmt or "flax-orbax",
                          status="unreadable", reason=f"cannot read {folder}: {e.strerror}")
    if found is None:
        return None
    kind, weights = found
    entry = ModelEntry(id=entry_id, format=kind, path=str(folder), source=source,
                       checkpoint=str(weights))
    name = name or folder.name
    name_guess(entry, name if kind != "flax-orbax" else f"{name} {weights.name}")
    try:
        entry.bytes = tree_bytes(folder)
        if kind == "keras-preset":
            inspect_keras(entry, folder)
        elif kind == "hf-safetensors":
            _inspect_hf(entry, folder)
        else:
            _inspect_orbax(entry, folder, weights)
        if entry.tokenizer and entry.vocab_rows:
            entry.tokenizer_pieces = tokenizer_pieces(entry.tokenizer)
            entry.tokenizer_mismatch = vocab_mismatch(entry.vocab_rows, entry.tokenizer_pieces)
    except OSError as e:
        entry.fail("unreadable", f"cannot read {e.filename or folder}: {e.strerror}")
    except Exception as e:  # a bug or an unforeseen layout: list it, never crash the listing
        log.debug("inspecting %s failed", folder, exc_info=True)
        entry.fail("unreadable", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if entry.status == "ok" and entry.tokenizer is None and kind != "keras-preset":
        entry.fail("incomplete", "no tokenizer.model beside the weights; set [model] tokenizer")
    return entry


def tokenizer_pieces(path: str) -> int | None:
    """Pieces of a SentencePiece model file (None if it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _pieces(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _pieces(path: str, _size: int, _mtime: int) -> int | None:
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    try:
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
    except (OSError, ValueError, Exception):  # noqa: BLE001 - protobuf's DecodeError among them
        return None
    return len(proto.pieces) or None


def find_tokenizer(*folders: Path) -> str | None:
    for folder in folders:
        for name in TOKENIZER_NAMES:
            if (folder / name).is_file():
                return str(folder / name)
    return None


def tree_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size  # follows HF's blob symlinks
            except OSError:
                pass
    return total


def _inspect_hf(entry: ModelEntry, folder: Path) -> None:
    from adapters_lib.models.hf import SafetensorsDir, SafetensorsError, check_hf_shapes

    entry.tokenizer = find_tokenizer(folder)
    try:
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise ArchError("config.json missing beside the safetensors", "incomplete")
        config = read_json(config_file, "config.json")
        fam = families.hf_family(config)
        if fam != "other":
            entry.family = fam
        arch = families.from_hf_config(config)
        set_arch(entry, arch)
        try:
            tensors = SafetensorsDir(folder)
        except SafetensorsError as e:
            status = "incomplete" if "missing" in str(e) else "unreadable"
            raise ArchError(str(e), status, arch.family) from None
        shapes = tensors.shapes()
        entry.params = families.shape_param_count(shapes)
        problem = check_hf_shapes(arch, shapes)
        if problem:
            raise ArchError(problem, "unsupported", arch.family)
    except ArchError as e:
        if e.family != "other":
            entry.family = e.family
        entry.fail(e.status, e.reason)


def _inspect_orbax(entry: ModelEntry, folder: Path, ckpt: Path) -> None:
    entry.tokenizer = find_tokenizer(folder, ckpt, ckpt.parent)
    try:
        shapes = orbax_shapes(ckpt)
        entry.params = families.shape_param_count(shapes)
        config_file = next((p / "config.json" for p in (folder, ckpt)
                            if (p / "config.json").is_file()), None)
        if config_file is not None:
            arch = families.from_hf_config(read_json(config_file, "config.json"))
            from adapters_lib.models.hf import gemma_shapes

            shapes_n = {tuple(k.split("/")): v for k, v in shapes.items()}
            for path, shape in gemma_shapes(arch).items():
                if shapes_n.get(path) != shape:
                    raise ArchError(f"{'/'.join(path)} has shape {shapes_n.get(path)}, "
                                    f"config.json implies {shape}", "unsupported", arch.family)
        elif entry.family == "gemma3n" or any("altup" in k or "laurel" in k for k in shapes):
            arch = gemma3n.from_shapes(shapes)
        elif entry.family == "gemma4" or any("k_einsum" in k or "skip_scale" in k for k in shapes):
            arch = gemma4.from_shapes(shapes)
        else:
            arch = families.from_shapes(shapes)
        set_arch(entry, arch)
    except ArchError as e:
        if e.family != "other":
            entry.family = e.family
        entry.fail(e.status, e.reason)
