"""Load a model named by a ``ModelSpec``: the gemma module, its params, its tokenizer.

``load_model(spec)`` is the one door through which training, sampling and export get a
base model. ``source = "demo"`` gives the built-in demo model; catalog ids and paths are
resolved by ``adapters_lib.catalog`` and loaded from their on-disk layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters_lib.config import ModelSpec
from adapters_lib.errors import WorkbenchError


@dataclass
class LoadedModel:
    """A base model ready to wrap with LoRA, train and sample."""

    model: Any
    """The (unwrapped) ``gm.nn.Transformer`` instance."""
    params: Any
    """The base params pytree (jax arrays, possibly sharded)."""
    tokenizer: Any
    """A ``gm.text.Tokenizer`` built with a local ``path=``."""
    source: str
    """What was asked for: "demo", a catalog id, a path."""
    family: str = "gemma3"
    tokenizer_path: str = ""
    quantize: str = "none"
    """How the base params are held (``[model] quantize``; ``models.quantize``)."""

    @property
    def config(self) -> Any:
        return self.model.config


def load_model(spec: ModelSpec, *, param_dtype: str = "float32", sharding: Any = None) -> LoadedModel:
    """Load the base model for ``spec``.

    ``sharding``: a callable ``(path_tuple, ShapeDtypeStruct) -> jax.sharding.Sharding`` or
    None (single device); params are placed at load time. ``spec.quantize`` other than
    "none": the projection weights are then quantized where they lie and the model reads
    them quantized (``models.quantize``).
    """
    loaded = _load(spec, param_dtype, sharding)
    if spec.quantize != "none":
        from adapters_lib.models import quantize

        loaded = quantize.quantize_loaded(loaded, spec)
    return loaded


def _load(spec: ModelSpec, param_dtype: str, sharding: Any) -> LoadedModel:
    if spec.source == "demo":
        return _load_demo(spec, param_dtype, sharding)
    try:
        from adapters_lib.models import weights  # the catalog issue's loaders
    except ImportError:
        raise WorkbenchError(
            f"model.source {spec.source!r}: only the demo model can be loaded in this build",
            where="[model] source", hint='use source = "demo"',
        ) from None
    return weights.load_from_source(spec, param_dtype=param_dtype, sharding=sharding)


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


def place(params: Any, sharding: Any) -> Any:
    """Put a params tree on devices: ``sharding`` is a Sharding or a callable per leaf."""
    import jax

    if callable(sharding) and not isinstance(sharding, jax.sharding.Sharding):
        return jax.tree_util.tree_map_with_path(
            lambda path, x: jax.device_put(x, sharding(path, x)), params
        )
    return jax.device_put(params, sharding)
