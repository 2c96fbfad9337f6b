"""``LoadedModel`` (a base model ready to wrap, train and sample) and ``place`` (params onto
devices): the types both the demo loader (``loader``) and the catalog loaders (``weights``) use,
below both of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class LoadedModel:
    """A base model ready to wrap with LoRA, train and sample."""

    model: Any
    """The (unwrapped) gemma model instance (``gm.nn.Transformer`` or a family's own)."""
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
    towers: tuple[str, ...] = ()
    """Media towers the checkpoint holds beside the text model (listed, not loaded): its HF
    layout then nests the text layers under ``model.language_model`` (``export.peft``)."""

    @property
    def config(self) -> Any:
        return self.model.config


def place(params: Any, sharding: Any) -> Any:
    """Put a params tree on devices: ``sharding`` is a Sharding or a callable per leaf."""
    import jax

    if callable(sharding) and not isinstance(sharding, jax.sharding.Sharding):
        return jax.tree_util.tree_map_with_path(
            lambda path, x: jax.device_put(x, sharding(path, x)), params
        )
    return jax.device_put(params, sharding)
