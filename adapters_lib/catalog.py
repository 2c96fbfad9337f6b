"""Find Gemma weights on disk without loading them.

Sources, in listing order:
- the built-in demo model (``id = "demo"``);
- the kagglehub cache (``$KAGGLEHUB_CACHE`` or ``~/.cache/kagglehub``):
  ``models/<owner>/<model>/<framework>/<variation>/<version>/``; kagglehub marks a finished
  download with the file ``<variation>/<version>.complete`` (kagglehub 1.0.3, ``cache.py``);
- the Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
  ``~/.cache/huggingface/hub``), read with ``huggingface_hub.scan_cache_dir``;
- folders named in ``<config dir>/models.toml`` (``folders = [...]``) and with ``--path``.

Each model folder is read for its metadata only: orbax ``_METADATA``/zarr headers, the
safetensors JSON headers, ``config.json``. This module imports neither jax nor gemma, so
the CLI lists models in a blink. ``resolve(source)`` turns ``[model] source`` into an entry.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from adapters_lib.models.families import Arch, ArchError

log = logging.getLogger(__name__)

FORMATS = ("flax-orbax", "hf-safetensors", "keras-preset", "demo")
STATUSES = ("ok", "incomplete", "unreadable", "unsupported")
KAGGLE_FRAMEWORKS = {"flax": "flax-orbax", "jax": "flax-orbax", "keras": "keras-preset",
                     "transformers": "hf-safetensors"}
TOKENIZER_NAMES = ("tokenizer.model",)


@dataclass
class ModelEntry:
    """One model found on disk (contract: the ``to_dict`` keys)."""

    id: str
    family: str = "other"
    size: str = "custom"
    variant: str = "pt"
    format: str = "flax-orbax"
    path: str = ""
    tokenizer: str | None = None
    bytes: int = 0
    params: int | None = None
    status: str = "ok"
    reason: str = ""
    source: str = "folder"
    """Where it was found: builtin, kaggle, huggingface, folder."""
    arch: Arch | None = field(default=None, repr=False)
    checkpoint: str = ""
    """The orbax checkpoint directory (may be a child of ``path``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "size": self.size, "variant": self.variant,
                "format": self.format, "path": self.path, "tokenizer": self.tokenizer,
                "bytes": self.bytes, "params": self.params, "status": self.status,
                "reason": self.reason, "source": self.source}

    def fail(self, status: str, reason: str) -> ModelEntry:
        """Record the first problem found (later ones do not overwrite it)."""
        if self.status == "ok":
            self.status, self.reason = status, reason
        return self


# --------------------------------------------------------------------------- locations


def kaggle_cache_dir() -> Path:
    return Path(os.environ.get("KAGGLEHUB_CACHE") or "~/.cache/kagglehub").expanduser()


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def user_config_file() -> Path:
    return paths.config_dir() / "models.toml"


def configured_folders() -> list[Path]:
    """``folders = [...]`` from ``<config dir>/models.toml`` (absent file: none)."""
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
    return [Path(f).expanduser() for f in folders]


# --------------------------------------------------------------------------- listing


def list_models(paths: tuple[str | Path, ...] | list[str | Path] = (), *,
                include_demo: bool = True) -> list[ModelEntry]:
    """Every model found: demo, kagglehub cache, HF cache, configured folders, ``paths``."""
    entries: list[ModelEntry] = [demo_entry()] if include_demo else []
    entries += scan_kaggle(kaggle_cache_dir())
    entries += scan_hf(hf_cache_dir())
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
    """The entry for ``[model] source``: "demo", a catalog id, or a path to weights."""
    if source == "demo":
        return demo_entry()
    path = Path(source.removeprefix("local:")).expanduser()
    if path.exists():
        real = os.path.realpath(path)
        caches = (kaggle_cache_dir(), hf_cache_dir())
        if any(real.startswith(os.path.realpath(c) + os.sep) for c in caches):
            # inside a cache: the cache's view knows about completion markers and partial blobs
            for entry in scan_kaggle(caches[0]) + scan_hf(caches[1]):
                if entry.path and os.path.realpath(entry.path) == real:
                    return entry
        entry = inspect_dir(path, entry_id=f"local:{path.resolve()}", source="folder")
        if entry is None:
            raise WorkbenchError(f"no Gemma weights found in {path}", where="[model] source",
                                 hint="point at a folder with an orbax checkpoint, "
                                      "*.safetensors + config.json, or a Keras preset")
        return entry
    entries = list_models(paths)
    for entry in entries:
        if entry.id == source:
            return entry
    bare = [e for e in entries if e.id.split(":", 1)[-1] == source]
    if len(bare) == 1:
        return bare[0]
    ids = [e.id for e in entries]
    close = difflib.get_close_matches(source, ids, n=1, cutoff=0.4)
    hint = f"did you mean {close[0]!r}?" if close else "run `gemma-workbench models` to see the ids"
    raise WorkbenchError(f"no model {source!r} in the catalog and no such path",
                         where="[model] source", hint=hint)


def demo_entry() -> ModelEntry:
    from adapters_lib.models import demo  # light: no jax at import

    arch = families.KNOWN[("gemma3", "custom")][1]
    tok = next(iter(sorted(paths.demo_dir().glob("demo-tokenizer-*.model"))), None) \
        if paths.demo_dir().is_dir() else None
    return ModelEntry(id="demo", family="gemma3", size="custom", variant="pt", format="demo",
                      path="", tokenizer=str(tok) if tok else None, bytes=0,
                      params=arch.param_count(), source="builtin", arch=arch,
                      reason=f"built-in tiny Gemma 3 (vocab {demo.DEMO_VOCAB}); "
                             "tokenizer made at first use")


# --------------------------------------------------------------------------- kagglehub


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
        _name_guess(entry, hint_name)
        if complete:
            entry.fail("unreadable", f"no weights in {folder} ({framework} framework)")
    if not complete:
        entry.status = "incomplete"
        entry.reason = (f"download not finished: kagglehub's completion marker "
                        f"{variation.name}/{version}.complete is missing")
    return entry


# --------------------------------------------------------------------------- Hugging Face


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
            entry = inspect_dir(Path(rev.snapshot_path), entry_id=entry_id, source="huggingface",
                                name=repo.repo_id, fmt="hf-safetensors")
            if entry is None:
                entry = ModelEntry(id=entry_id, format="hf-safetensors",
                                   path=str(rev.snapshot_path), source="huggingface")
                _name_guess(entry, repo.repo_id)
                entry.fail("incomplete" if partial else "unreadable",
                           "no config.json / *.safetensors in the snapshot"
                           + (" (download in progress or interrupted)" if partial else ""))
            elif partial and entry.status != "ok":
                entry.reason += " (a download is in progress or was interrupted)"
            entries.append(entry)
    return entries


# --------------------------------------------------------------------------- folders


def scan_folder(folder: Path, *, missing_ok: bool = False, depth: int = 2) -> list[ModelEntry]:
    """A model folder, or a folder holding model folders (``depth`` levels deep)."""
    if not folder.is_dir():
        if missing_ok:
            log.warning("model folder %s does not exist", folder)
            return []
        raise WorkbenchError(f"{folder} is not a folder", where="--path",
                             hint="name a folder holding model weights")
    entry = inspect_dir(folder, entry_id=f"local:{folder.resolve()}", source="folder")
    if entry is not None:
        return [entry]
    entries: list[ModelEntry] = []
    if depth == 0:
        return entries
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        entries += scan_folder(child, missing_ok=True, depth=depth - 1)
    return entries


# --------------------------------------------------------------------------- one folder


def detect_format(folder: Path) -> tuple[str, Path] | None:
    """(format, weights dir) of a model folder, or None when it holds no weights."""
    config = folder / "config.json"
    if (folder / "metadata.json").is_file() or (folder / "model.weights.h5").is_file():
        return "keras-preset", folder
    if config.is_file() and '"keras_hub' in _head(config):
        return "keras-preset", folder
    if any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").exists():
        return "hf-safetensors", folder
    if _is_orbax(folder):
        return "flax-orbax", folder
    subs = [p for p in folder.iterdir() if p.is_dir() and _is_orbax(p)] if folder.is_dir() else []
    if len(subs) == 1:
        return "flax-orbax", subs[0]
    if config.is_file():
        return "hf-safetensors", folder
    return None


def _is_orbax(folder: Path) -> bool:
    return any((folder / n).exists() for n in ("_METADATA", "manifest.ocdbt", "_CHECKPOINT_METADATA",
                                               "checkpoint"))


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
    _name_guess(entry, name if kind != "flax-orbax" else f"{name} {weights.name}")
    try:
        entry.bytes = _tree_bytes(folder)
        if kind == "keras-preset":
            _inspect_keras(entry, folder)
        elif kind == "hf-safetensors":
            _inspect_hf(entry, folder)
        else:
            _inspect_orbax(entry, folder, weights)
    except OSError as e:
        entry.fail("unreadable", f"cannot read {e.filename or folder}: {e.strerror}")
    except Exception as e:  # a bug or an unforeseen layout: list it, never crash the listing
        log.debug("inspecting %s failed", folder, exc_info=True)
        entry.fail("unreadable", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if entry.status == "ok" and entry.tokenizer is None and kind != "keras-preset":
        entry.fail("incomplete", "no tokenizer.model beside the weights; set [model] tokenizer")
    return entry


def _name_guess(entry: ModelEntry, name: str) -> None:
    """Family/size/variant from a release name like ``gemma-3-1b-it``, ``gemma2-2b``."""
    low = name.lower()
    entry.variant = "it" if re.search(r"(^|[-_/ .])(it|instruct)([-_/ .]|$)", low) else "pt"
    fam = re.search(r"gemma[-_ ]?(\d)(n)?", low)
    if fam and entry.family == "other":
        entry.family = {"2": "gemma2", "3": "gemma3", "4": "gemma4"}.get(fam.group(1), "other")
    size = re.search(r"(?<![\w.])(e\d+b|\d+(?:\.\d+)?[mb])(?![\w])", low.replace("_", "-"))
    if size and entry.size == "custom":
        entry.size = size.group(1)


def _set_arch(entry: ModelEntry, arch: Arch) -> None:
    entry.arch = arch
    entry.family = arch.family
    entry.size = families.size_of(arch)


def _find_tokenizer(*folders: Path) -> str | None:
    for folder in folders:
        for name in TOKENIZER_NAMES:
            if (folder / name).is_file():
                return str(folder / name)
    return None


def _tree_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size  # follows HF's blob symlinks
            except OSError:
                pass
    return total


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArchError(f"{what} is not valid JSON ({e.__class__.__name__})", "unreadable") from None
    if not isinstance(data, dict):
        raise ArchError(f"{what} is not a JSON object", "unreadable")
    return data


def _inspect_hf(entry: ModelEntry, folder: Path) -> None:
    from adapters_lib.models.hf_convert import SafetensorsDir, SafetensorsError, check_hf_shapes

    entry.tokenizer = _find_tokenizer(folder)
    try:
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise ArchError("config.json missing beside the safetensors", "incomplete")
        config = _read_json(config_file, "config.json")
        fam = families.hf_family(config)
        if fam != "other":
            entry.family = fam
        arch = families.from_hf_config(config)
        _set_arch(entry, arch)
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
    entry.tokenizer = _find_tokenizer(folder, ckpt, ckpt.parent)
    try:
        shapes = orbax_shapes(ckpt)
        entry.params = families.shape_param_count(shapes)
        if entry.family == "gemma4":
            raise ArchError("Gemma 4 checkpoints are listed; this build loads Gemma 2 and 3 only",
                            "unsupported", "gemma4")
        config_file = next((p / "config.json" for p in (folder, ckpt) if (p / "config.json").is_file()),
                           None)
        if config_file is not None:
            arch = families.from_hf_config(_read_json(config_file, "config.json"))
            from adapters_lib.models.hf_convert import gemma_shapes

            shapes_n = {tuple(k.split("/")): v for k, v in shapes.items()}
            for path, shape in gemma_shapes(arch).items():
                if shapes_n.get(path) != shape:
                    raise ArchError(f"{'/'.join(path)} has shape {shapes_n.get(path)}, "
                                    f"config.json implies {shape}", "unsupported", arch.family)
        else:
            arch = families.from_shapes(shapes)
        _set_arch(entry, arch)
    except ArchError as e:
        if e.family != "other":
            entry.family = e.family
        entry.fail(e.status, e.reason)


# --------------------------------------------------------------------------- orbax metadata


def orbax_shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    """Param shapes of an orbax checkpoint from its metadata (arrays are not read).

    Keys in gemma's nested form (``families.normalise_key``). Raises ``ArchError`` with
    status "unreadable" for a damaged checkpoint.
    """
    meta_file = ckpt / "_METADATA"
    shapes: dict[str, tuple[int, ...]] = {}
    ocdbt = (ckpt / "manifest.ocdbt").exists()
    if meta_file.is_file():
        meta = _read_json(meta_file, "orbax _METADATA")
        tree = meta.get("tree_metadata")
        if not isinstance(tree, dict):
            raise ArchError("orbax _METADATA has no tree_metadata", "unreadable")
        ocdbt = ocdbt or bool(meta.get("use_ocdbt"))
        for value in tree.values():
            keys = [str(k.get("key")) for k in value.get("key_metadata", [])]
            shape = (value.get("value_metadata") or {}).get("write_shape")
            if shape is None:
                shapes = {}
                break
            shapes[families.normalise_key("/".join(keys))] = tuple(int(s) for s in shape)
    if ocdbt:
        if not (ckpt / "manifest.ocdbt").is_file() or (ckpt / "manifest.ocdbt").stat().st_size == 0:
            raise ArchError("orbax checkpoint data missing (manifest.ocdbt)", "unreadable")
        zarr = _ocdbt_zarr_shapes(ckpt)
        if not zarr:
            raise ArchError("orbax checkpoint holds no arrays", "unreadable")
        if not shapes:
            shapes = zarr
        elif set(zarr) != set(shapes):
            missing = sorted(set(shapes) - set(zarr))[:2]
            raise ArchError(f"orbax checkpoint lacks the data of {', '.join(missing)}", "unreadable")
    elif not shapes:
        for zarray in ckpt.glob("*/.zarray"):
            info = _read_json(zarray, f"{zarray.parent.name}/.zarray")
            shapes[families.normalise_key(zarray.parent.name)] = tuple(info["shape"])
    if not shapes:
        raise ArchError("orbax checkpoint metadata lists no arrays", "unreadable")
    return shapes


def _ocdbt_zarr_shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    """Shapes from the ``.zarray`` headers inside an OCDBT store (tensorstore, no jax)."""
    import tensorstore as ts

    try:
        kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{ckpt.resolve()}/"}).result()
        keys = [k for k in kv.list().result() if k.endswith(b"/.zarray")]
        out = {}
        for key in keys:
            info = json.loads(kv.read(key).result().value)
            out[families.normalise_key(key.decode()[: -len("/.zarray")])] = tuple(info["shape"])
    except (ValueError, RuntimeError, KeyError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        first = first.replace(f"{ckpt.resolve()}/", "").replace("Error decoding local file ", "")
        first = first[:100].rstrip(": ")
        raise ArchError(f"orbax checkpoint data is damaged: {first}", "unreadable") from None
    return out


# --------------------------------------------------------------------------- Keras presets


_KERAS_FAMILY = {"Gemma3Backbone": "gemma3", "Gemma4Backbone": "gemma4"}


def _inspect_keras(entry: ModelEntry, folder: Path) -> None:
    tok = folder / "assets" / "tokenizer" / "vocabulary.spm"
    entry.tokenizer = str(tok) if tok.is_file() else None
    try:
        config = _read_json(folder / "config.json", "config.json") \
            if (folder / "config.json").is_file() else {}
        cls = str(config.get("class_name", ""))
        body = config.get("config") or {}
        if cls == "GemmaBackbone":
            entry.family = "gemma2" if body.get("use_post_ffw_norm") else "other"
        elif cls in _KERAS_FAMILY:
            entry.family = _KERAS_FAMILY[cls]
        elif cls:
            entry.family = "other"
            entry.fail("unsupported", f"Keras preset of {cls}, not a Gemma backbone")
        meta = folder / "metadata.json"
        if meta.is_file():
            count = _read_json(meta, "metadata.json").get("parameter_count")
            entry.params = int(count) if count else None
        if entry.family in ("gemma2", "gemma3") and body:
            f = int(body.get("intermediate_dim", 0))
            f = f // 2 if cls == "GemmaBackbone" else f
            dims = (body.get("num_layers"), body.get("hidden_dim"), f, body.get("num_query_heads"),
                    body.get("head_dim"), body.get("num_key_value_heads"))
            for (fam, size), (_, known) in families.KNOWN.items():
                if fam == entry.family and known.dims() == dims and size != "custom":
                    entry.size = size
        if not cls:
            entry.fail("unreadable", "Keras preset without config.json")
        elif not (folder / "model.weights.h5").is_file():
            entry.fail("incomplete", "Keras preset without model.weights.h5")
        elif entry.tokenizer is None:
            entry.fail("incomplete", "Keras preset without assets/tokenizer/vocabulary.spm")
    except ArchError as e:
        entry.fail(e.status, e.reason)
