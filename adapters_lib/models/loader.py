"""Load a model named by a ``ModelSpec``: the gemma module, its params, its tokenizer.

``load_model(spec)`` is the one door through which training, sampling and export get a
base model. ``source = "demo"`` gives the built-in demo model; catalog ids and paths are
resolved by ``adapters_lib.catalog`` and loaded from their on-disk layout.
"""

from __future__ import annotations

from typing import Any

from adapters_lib.config import ModelSpec
from adapters_lib.models.loaded import LoadedModel, place

__all__ = ["LoadedModel", "load_model", "place"]


def load_model(spec: ModelSpec, *, param_dtype: str = "float32", sharding: Any = None,
               generation_dtype: str = "") -> LoadedModel:
    """Load the base model for ``spec``.

    ``sharding``: a callable ``(path_tuple, ShapeDtypeStruct) -> jax.sharding.Sharding`` or
    None (single device); params are placed at load time. ``spec.quantize`` other than
    "none": the projection weights are then quantized where they lie and the model reads
    them quantized (``models.quantize``). A model loaded before in this process with the
    same source, files, dtype and placement is reused (``models.model_cache``).

    ``generation_dtype`` (not ""): a generation copy — the model as loaded in ``param_dtype``
    (the one a run trained), its float params cast to ``generation_dtype`` (the same weights
    rounded, never another load's: the demo's bf16 init is another model) and, unquantized,
    its projections in the decode layout (``models.decode_layout``); kept beside the model it
    was made from. An int8 base's copy holds its int8 weights as ``decode_layout.Int8Rows``
    (int8 × int8 dots). For sampling only: training and export read the plain model.
    """
    if spec.quantize != "none":
        _check_quantizes(spec)
    if spec.quantize == "gguf":  # the GGUF's own blocks, read as they are
        return _load_gguf_blocks(spec, generation_dtype or param_dtype, sharding)
    # quantizing deletes the float weights it replaces: a base to quantize is never a kept one
    keep = spec.quantize == "none"
    if generation_dtype:
        from adapters_lib.models import model_cache

        key, load = _loader(spec, param_dtype, sharding, keep=keep)
        copy_key = None if key is None else (*key, ("generation", generation_dtype))
        loaded = model_cache.kept(copy_key, lambda: generation_copy(
            model_cache.kept(key, load), generation_dtype, layout=keep))
    else:
        loaded = _load(spec, param_dtype, sharding, keep=keep)
    if spec.quantize != "none":
        from adapters_lib.models import quantize

        loaded = quantize.quantize_loaded(loaded, spec)
        if generation_dtype and spec.quantize == "int8":  # read by int8 × int8 dots
            from adapters_lib.models import decode_layout

            loaded = decode_layout.int8_copy(loaded, generation_dtype)
    return loaded


def _check_quantizes(spec: ModelSpec) -> None:
    """One line, before any weight is read, for a quantize setting the base cannot take."""
    from adapters_lib import catalog
    from adapters_lib.models.weights import check_quantize

    check_quantize(catalog.find(spec.source), spec.quantize, spec.quantize_tile_size,
                   spec.quantize_embedding)


def generation_copy(loaded: LoadedModel, dtype: str, *, layout: bool = True) -> LoadedModel:
    """``loaded`` with its floating params cast to ``dtype`` (new arrays; the source untouched),
    the model's dtype set to it as a load in ``dtype`` has, and (``layout``) the projections in
    the decode layout."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from adapters_lib.models import decode_layout

    target = jnp.dtype(dtype)
    params = jax.tree.map(lambda x: x.astype(target) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                          loaded.params)
    model = loaded.model.clone(dtype=target) if hasattr(loaded.model, "dtype") else loaded.model
    out = dataclasses.replace(loaded, model=model, params=params)
    return decode_layout.decode_copy(out) if layout else out


def _load(spec: ModelSpec, param_dtype: str, sharding: Any, *, keep: bool) -> LoadedModel:
    from adapters_lib.models import model_cache

    key, load = _loader(spec, param_dtype, sharding, keep=keep)
    return model_cache.kept(key, load)


def is_kept(spec: ModelSpec, *, param_dtype: str = "float32", generation_dtype: str = "") -> bool:
    """Whether ``load_model(spec, param_dtype=…, generation_dtype=…)`` on one device would take
    the model cache's model (no read, nothing new placed on a device): a caller that must not
    add a model to the devices (a run trains on them) asks first."""
    from adapters_lib.models import model_cache

    if spec.quantize != "none":
        return False
    key, _ = _loader(spec, param_dtype, None, keep=True)
    if key is not None and generation_dtype:
        key = (*key, ("generation", generation_dtype))
    return model_cache.holds(key)


def _loader(spec: ModelSpec, param_dtype: str, sharding: Any, *, keep: bool) -> tuple[tuple | None, Any]:
    """(the model cache's key, the load) of ``spec`` in ``param_dtype``."""
    from adapters_lib.models import model_cache

    placement = model_cache.placement_key(sharding) if keep else None
    if spec.source == "demo":
        key = None if placement is None else ("demo", spec.tokenizer, param_dtype, placement, ())
        return key, lambda: _load_demo(spec, param_dtype, sharding)
    from adapters_lib.models import weights  # the catalog's loaders (light to import here)

    entry = weights.resolve(spec.source)
    files = _files(entry, spec)
    key = None if placement is None or not files else (spec.source, spec.tokenizer, param_dtype, placement, files)
    return key, lambda: weights.load_entry(entry, tokenizer=spec.tokenizer, param_dtype=param_dtype,
                                           sharding=sharding, source=spec.source)


def _files(entry: Any, spec: ModelSpec) -> tuple:
    from adapters_lib.models import model_cache

    files = model_cache.files_fingerprint(entry.checkpoint or entry.path) if entry.path else ()
    tok = model_cache.files_fingerprint(spec.tokenizer) if spec.tokenizer else ()
    return files + tok if files else ()


def fingerprint(spec: ModelSpec) -> tuple | None:
    """What a load of ``spec`` reads: the source and tokenizer as asked and the files' names,
    sizes and mtimes (the demo: none, its weights come from a fixed seed); None when the
    files cannot be named. A model rewritten on disk has another fingerprint."""
    if spec.source == "demo":
        return ("demo", spec.tokenizer)
    from adapters_lib.models import weights

    files = _files(weights.resolve(spec.source), spec)
    return (spec.source, spec.tokenizer, files) if files else None


def _load_demo(spec: ModelSpec, param_dtype: str, sharding: Any) -> LoadedModel:
    from gemma import gm

    from adapters_lib.models import demo

    model = demo.demo_model(param_dtype)
    params = demo.demo_params(dtype=param_dtype)
    if sharding is not None:
        params = place(params, sharding)
    tok_path = spec.tokenizer or str(demo.ensure_demo_tokenizer())
    tokenizer = gm.text.Gemma3Tokenizer(path=tok_path)
    return LoadedModel(model=model, params=params, tokenizer=tokenizer, source="demo",
                       family="gemma3", tokenizer_path=tok_path)


def _load_gguf_blocks(spec: ModelSpec, param_dtype: str, sharding: Any) -> LoadedModel:
    """``quantize = "gguf"``: the GGUF named by ``spec`` with its blocks kept (``quantize_gguf``)."""
    import dataclasses

    from adapters_lib.models import quantize, weights

    entry = weights.resolve(spec.source)  # a GGUF (load_model's check_quantize said so)
    loaded = weights.load_entry(entry, tokenizer=spec.tokenizer, param_dtype=param_dtype,
                                sharding=sharding, source=spec.source, gguf_blocks=True)
    return dataclasses.replace(loaded, model=quantize.with_quantized_base(loaded.model), quantize="gguf")
