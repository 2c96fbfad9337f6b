"""Load catalog entries (orbax checkpoints, HF safetensors, GGUF, Keras presets) into gemma params
on the mesh.

``load_from_source(spec, param_dtype=, sharding=)`` is what ``loader.load_model`` calls for
every non-demo source. Params are placed on devices as they are read:
- orbax: restored by gemma's ``gm.ckpts.load_params`` (it knows the flat release layout,
  the nested one and skips vision weights) into an abstract target of
  ``jax.ShapeDtypeStruct(shape, dtype, sharding=…)``, with ``donate=False`` — never with
  ``sharding=`` (a dict tree of shardings fails there, see STACK-NOTES);
- safetensors: tensor by tensor (memory-mapped), converted with ``hf_convert.leaf_plan``,
  cast and ``device_put`` with its sharding, so the host holds one tensor at a time;
- Keras presets: tensor by tensor from ``model.weights.h5`` (or its shards), named as HF's by
  ``keras_weights`` and placed as the safetensors are;
- GGUF: tensor by tensor too, dequantized by the ``gguf`` package in row blocks, llama.cpp's
  Gemma conventions undone (``gguf_weights``); the tokenizer is rebuilt from the file's
  vocabulary (``gguf_tokenizer``). The starter model is assembled at its first load.

``sharding`` is None (first device), a ``jax.sharding.Sharding`` for every leaf, or a
callable ``(path, ShapeDtypeStruct) -> Sharding`` where ``path`` is the key path that
``jax.tree_util.tree_map_with_path`` gives over the nested params dict.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from adapters_lib.catalog import ModelEntry, ensure_tokenizer, resolve
from adapters_lib.config import ModelSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from adapters_lib.models.loaded import LoadedModel

log = logging.getLogger(__name__)


def load_from_source(spec: ModelSpec, *, param_dtype: str = "float32",
                     sharding: Any = None) -> LoadedModel:
    """Resolve ``spec.source`` in the catalog and load it (see the module doc)."""
    entry = resolve(spec.source)
    return load_entry(entry, tokenizer=spec.tokenizer, param_dtype=param_dtype,
                      sharding=sharding, source=spec.source)


def check_loadable(entry: ModelEntry, tokenizer: str = "", *, build_tokenizer: bool = True) -> None:
    """Raise the entry's own reason when it cannot be loaded by the gemma route.

    ``build_tokenizer=False``: a GGUF's tokenizer is not rebuilt here (a check before a run
    exists stays metadata only; the load builds it)."""
    where = f"[model] source = {entry.id!r}"
    if entry.format == "gguf" and entry.status == "ok" and not tokenizer and build_tokenizer:
        ensure_tokenizer(entry)
    missing_tok_only = entry.status == "incomplete" and entry.tokenizer is None and \
        (entry.reason.startswith("no tokenizer.model") or "no tokenizer vocabulary" in entry.reason)
    if entry.status != "ok" and not (missing_tok_only and tokenizer):
        # the listing's reason may carry its own advice: said once
        hint = "" if "set [model] tokenizer" in entry.reason else _hint(entry)
        raise WorkbenchError(f"{entry.status}: {entry.reason}", where=where, hint=hint)
    if entry.arch is None:
        raise WorkbenchError("the architecture could not be determined", where=where)
    tok = tokenizer or entry.tokenizer
    if tok and not Path(tok).is_file():
        raise WorkbenchError(f"tokenizer {tok} not found", where="[model] tokenizer",
                             hint="point at a SentencePiece tokenizer.model")


def check_quantize(entry: ModelEntry, mode: str, tile: int = 64, table: str = "auto") -> None:
    """What a load would refuse about ``[model] quantize``, from the catalog entry alone (no
    weight read, no JAX): a family it does not reach, "gguf" on a base that is not a GGUF, a
    tile that does not divide a Gemma 2/3 weight. Raised as the load raises it, so that a
    launch (``engine.handlers.run_commands``) and the estimate refuse before a run exists
    (here, not in ``quantize_layout``: the TUI reads that one, and ``families`` is engine-side)."""
    from adapters_lib.models.quantize.quantize_layout import WHERE, arch_shapes, check

    if mode == "none":
        return
    if entry.format != "demo":
        fam = families.family(entry.family)
        if not fam.quantizes:
            raise WorkbenchError(f"a {fam.label} base cannot be held quantized by this build",
                                 where=WHERE, hint='set [model] quantize = "none"')
    if mode == "gguf":
        if entry.format != "gguf":
            what = "the demo model" if entry.format == "demo" else f"{entry.id!r} ({entry.format})"
            raise WorkbenchError(f'model.quantize = "gguf" needs a GGUF base; {what} is not one',
                                 where=WHERE, hint='use "int8", "int4" or "nf4" for this model')
        return
    if type(entry.arch) is families.Arch:  # Gemma 2/3: its shapes from the entry (the rest at load)
        check(mode, tile, arch_shapes(entry.arch), transpose_gating=entry.arch.transpose_gating,
              table=table)


def _hint(entry: ModelEntry) -> str:
    if entry.status == "incomplete" and "tokenizer" in entry.reason:
        return "set [model] tokenizer to a tokenizer.model"
    if entry.status == "incomplete":
        return "finish or redo the download"
    if entry.status == "unreadable":
        return "the files are damaged: download them again"
    return "pick another model (gemma-workbench models)"


def load_entry(entry: ModelEntry, *, tokenizer: str = "", param_dtype: str = "float32",
               sharding: Any = None, source: str = "", gguf_blocks: bool = False) -> LoadedModel:
    """``gguf_blocks``: a GGUF's block tensors stay in their blocks (``quantize_gguf``)."""
    check_loadable(entry, tokenizer)
    arch = entry.arch
    assert arch is not None
    import jax.numpy as jnp

    start = time.perf_counter()
    model = families.model_class(arch)(dtype=jnp.dtype(param_dtype))
    try:
        if entry.format == "gguf":
            params = load_gguf(entry, arch, param_dtype, sharding, blocks=gguf_blocks)
        elif entry.format == "hf-safetensors":
            params = load_hf_params(Path(entry.path), arch, param_dtype, sharding)
        elif entry.format == "keras-preset":
            params = load_keras_params(Path(entry.path), arch, param_dtype, sharding)
        else:
            params = load_orbax_params(Path(entry.checkpoint or entry.path), arch, param_dtype,
                                       sharding)
    except WorkbenchError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise WorkbenchError(f"unreadable: cannot read the weights: {first}",
                             where=f"[model] source = {entry.id!r}",
                             hint="the files are damaged: download them again") from e
    tok_path = tokenizer or entry.tokenizer or ""
    tok = families.tokenizer_for(arch.family, tok_path)
    log.info("loaded %s (%s, %s) in %.1f s", entry.id, arch.family, entry.size,
             time.perf_counter() - start)
    return LoadedModel(model=model, params=params, tokenizer=tok, source=source or entry.id,
                       family=arch.family, tokenizer_path=tok_path,
                       towers=tuple(getattr(arch, "towers", ())))


# --------------------------------------------------------------------------- shardings


def _sharding_fn(sharding: Any):
    import jax

    if sharding is None:
        default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return lambda path, sds: default
    if isinstance(sharding, jax.sharding.Sharding):
        return lambda path, sds: sharding
    if callable(sharding):
        return sharding
    raise TypeError(f"sharding must be a Sharding or a callable, not {type(sharding).__name__}")


def abstract_params(arch: families.Arch, param_dtype: str, sharding: Any = None) -> dict:
    """The nested params tree of ``arch`` as ShapeDtypeStructs carrying their shardings."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.hf import gemma_shapes

    dtype = jnp.dtype(param_dtype)
    tree: dict[str, Any] = {}
    for path, shape in gemma_shapes(arch).items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = jax.ShapeDtypeStruct(shape, dtype)
    fn = _sharding_fn(sharding)
    return jax.tree_util.tree_map_with_path(
        lambda p, s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=fn(p, s)), tree)


# --------------------------------------------------------------------------- loaders


def gguf_info(entry: ModelEntry) -> Any:
    """The ``GGUFInfo`` of a GGUF entry (the starter model is assembled here, once)."""
    from adapters_lib.models import starter
    from adapters_lib.models.gguf import read_info

    path = starter.ensure_starter() if entry.source == "starter" else Path(entry.path)
    return read_info(path)


def load_gguf(entry: ModelEntry, arch: families.Arch, param_dtype: str, sharding: Any, *,
              blocks: bool = False) -> Any:
    """Dequantize a GGUF tensor by tensor straight onto the shardings (``gguf_weights``), or
    with ``blocks`` keep its block tensors as they are (``quantize_gguf``)."""
    from adapters_lib.models.gguf import GGUFError, load_gguf_params

    try:
        if blocks:
            from adapters_lib.models.quantize import load_gguf_blocks

            return load_gguf_blocks(gguf_info(entry), arch, param_dtype, _sharding_fn(sharding))
        return load_gguf_params(gguf_info(entry), arch, param_dtype, _sharding_fn(sharding))
    except GGUFError as e:
        raise WorkbenchError(f"{e.status}: {e.reason}", where=f"[model] source = {entry.id!r}",
                             hint=_hint(entry)) from None


def load_orbax_params(ckpt: Path, arch: families.Arch, param_dtype: str, sharding: Any) -> Any:
    """Restore a Flax orbax checkpoint (flat or nested layout) straight onto the shardings."""
    ckpts = gemma_ckpts(where=f"[model] source = {str(ckpt)!r}")
    target = abstract_params(arch, param_dtype, sharding)
    return ckpts.load_params(ckpt, params=target, donate=False, text_only=True)


def gemma_ckpts(where: str) -> Any:
    """gemma's ``gm.ckpts``: its import runs kauldron's trainer, whose clu writer imports
    TensorFlow and TensorBoard; where they are not installed, one line says so."""
    from gemma import gm

    try:
        return gm.ckpts
    except ImportError as e:
        missing = e.name or "tensorflow"
        raise WorkbenchError(
            f"orbax-format weights are read and written by gemma's gm.ckpts, which needs "
            f"{missing.split('.')[0]} (not installed)", where=where,
            hint="install it into the workbench's environment (pip install tensorflow), or use "
                 "the model in another format (HF safetensors, GGUF)") from None


def load_hf_params(folder: Path, arch: families.Arch, param_dtype: str, sharding: Any) -> Any:
    """Read HF safetensors tensor by tensor, convert, cast and place each gemma leaf."""
    from adapters_lib.models.hf import SafetensorsDir, SafetensorsError, hf_prefix

    try:
        tensors = SafetensorsDir(folder)
        prefix = hf_prefix(tensors.where)
    except (SafetensorsError, KeyError) as e:
        raise WorkbenchError(f"unreadable: {e}", where=f"[model] source = {str(folder)!r}") from None
    return place_named_tensors(tensors.where, tensors.get, prefix, arch, param_dtype, sharding)


def load_keras_params(folder: Path, arch: families.Arch, param_dtype: str, sharding: Any) -> Any:
    """A Keras preset's weights (``model.weights.h5`` or its shards), read tensor by tensor under
    their Hugging Face names (``keras_weights``) and placed as the safetensors are."""
    from adapters_lib.models.hf import KerasPresetTensors, hf_prefix

    with KerasPresetTensors(folder) as tensors:
        return place_named_tensors(tensors.where, tensors.get, hf_prefix(tensors.where), arch,
                                   param_dtype, sharding)


def place_named_tensors(where: Any, get: Any, prefix: str, arch: families.Arch, param_dtype: str,
                        sharding: Any) -> Any:
    """Convert HF-named tensors (``get(name)``, names in ``where``) into the gemma tree, one
    leaf at a time: cast, and ``device_put`` with its sharding."""
    import jax
    import numpy as np

    from adapters_lib.models.gguf import aligned
    from adapters_lib.models.hf import leaf_plan, omitted

    fn = _sharding_fn(sharding)
    dtype = np.dtype(jax.numpy.dtype(param_dtype))
    tree: dict[str, Any] = {}

    def read(name: str) -> np.ndarray:
        if prefix + name in where:
            return get(prefix + name)
        return omitted(name, arch)  # a KV-shared layer's k/v that the save dropped

    for path, names, convert in leaf_plan(arch):
        value = aligned(np.asarray(convert(*(read(n) for n in names))).astype(dtype, copy=False))
        keys = tuple(jax.tree_util.DictKey(p) for p in path)
        placed = jax.device_put(value, fn(keys, jax.ShapeDtypeStruct(value.shape, value.dtype)))
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = placed
    return tree
