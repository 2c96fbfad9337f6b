"""keras-hub's Gemma backbones as the Keras route sees them.

- ``GemmaBackbone`` (Gemma 1/2), ``Gemma3Backbone``, ``Gemma4Backbone``: ``EinsumDense``
  projections ``query``/``key``/``value``/``attention_output`` and ``ffw_gating``/
  ``ffw_gating_2``/``ffw_linear``; Gemma 4 adds the MoE expert bank (``moe_expert_bank``) and
  takes ``position_ids`` beside ``token_ids``/``padding_mask``.
- ``Gemma3nBackbone``: ``keras.layers.Dense`` projections ``q_proj``/``k_proj``/``v_proj``/
  ``o_proj`` and ``gate_proj``/``up_proj``/``down_proj`` in ``backbone.language_model``'s blocks.

``enable_lora(backbone, rank, alpha, targets)`` puts adapters on the text decoder blocks only
(a multimodal backbone's vision/audio towers have layers of the same names, and keras-hub's own
``backbone.enable_lora`` matches layers by name anywhere), never on the K/V of a KV-shared block
(its own K/V are not used, so their gradient is always zero; Gemma 4's have none), and on the
expert bank for ``experts`` (``keras_route.experts``). It leaves keras-hub's bookkeeping as
``backbone.enable_lora`` would, so ``backbone.save_lora_weights`` writes the same file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from adapters_lib.errors import WorkbenchError

EINSUM_LAYERS = {"q": "query", "k": "key", "v": "value", "o": "attention_output",
                 "gate": "ffw_gating", "up": "ffw_gating_2", "down": "ffw_linear"}
DENSE_LAYERS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
                "gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
EXPERT_BANK = "moe_expert_bank"

BACKBONES = ("GemmaBackbone", "Gemma3Backbone", "Gemma4Backbone", "Gemma3nBackbone")


def lora_layers(class_name: str) -> dict[str, str]:
    """Our LoRA target → the keras-hub layer name, for a backbone class."""
    if class_name == "Gemma3nBackbone":
        return DENSE_LAYERS
    if class_name == "Gemma4Backbone":
        return {**EINSUM_LAYERS, "experts": EXPERT_BANK}
    return EINSUM_LAYERS


def text_blocks(backbone: Any) -> list[Any]:
    """The text decoder blocks, in order."""
    owner = getattr(backbone, "language_model", None)
    return list((backbone if owner is None else owner).transformer_layers)


def kv_shared(block: Any) -> bool:
    return bool(getattr(block, "is_kv_shared_layer", False))


def takes_positions(backbone: Any) -> bool:
    """Gemma 4's CausalLM takes ``position_ids``."""
    return type(backbone).__name__ == "Gemma4Backbone"


def model_inputs(backbone: Any, tokens: Any, padding_mask: Any, positions: Any = None) -> dict[str, Any]:
    """The CausalLM's input dict (``positions`` defaults to 0..L-1 on every row)."""
    x = {"token_ids": tokens, "padding_mask": padding_mask}
    if takes_positions(backbone):
        if positions is None:
            import numpy as np

            positions = np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)
        x["position_ids"] = positions
    return x


# keras-hub's Gemma 4 block multiplies its FFW kernels directly (``ops.matmul(x, layer.kernel)``),
# which on an int8 layer reads the int8 values without their scale: those layers stay float
INT8_KEEP_FLOAT = {"Gemma4Backbone": ("ffw_gating", "ffw_gating_2", "ffw_linear")}


def quantize_int8(backbone: Any) -> list[str]:
    """Keras' own ``quantize("int8")`` (weights per output channel; activations quantized per
    token as they come) on the backbone's EinsumDense, Dense and embedding layers, but the ones
    ``INT8_KEEP_FLOAT`` names. Returns a note per kept-float kind. Call before ``enable_lora``
    (Keras' LoRA kernels then train in float over the int8 kernels)."""
    import warnings

    keep = INT8_KEEP_FLOAT.get(type(backbone).__name__, ())
    with warnings.catch_warnings(), _one_collection():
        # "Layer X does not have a `quantize` method", per norm
        warnings.simplefilter("ignore", UserWarning)
        backbone.quantize("int8", filters=lambda layer: layer.name not in keep)
    if keep:
        return [f"int8: {'/'.join(keep)} stay float (keras-hub's {type(backbone).__name__} block "
                "reads their kernels without the int8 scale)"]
    return []


@contextlib.contextmanager
def _one_collection() -> Iterator[None]:
    """One ``gc.collect()`` after the block instead of one a dropped variable: Keras'
    ``Layer.__delattr__`` runs a full collection for each variable it drops, and ``quantize``
    drops every quantized layer's float kernel (the demo's int8 build: 29 collections, 0.3 s
    each in a process holding JAX, Keras and TensorFlow, 8.5 of its 17.5 s; a collection a layer
    on a real model). The kernels' buffers go with their last reference; the one collection at
    the end frees any held in a cycle."""
    import gc

    collect = gc.collect
    gc.collect = lambda generation=2: 0  # Keras' call, ``import gc; gc.collect()``, reads it here
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()


def _sublayers(block: Any) -> list[Any]:
    return list(block._flatten_layers(include_self=False))


def enable_lora(backbone: Any, rank: int, alpha: float, targets: tuple[str, ...]) -> list[str]:
    """Freeze ``backbone`` and put rank-``rank`` adapters (scale alpha/rank) on ``targets``;
    returns the adapted layers' paths. A target that matches no layer is a ``WorkbenchError``."""
    from adapters_lib.keras_route.experts import enable_expert_lora

    class_name = type(backbone).__name__
    names = lora_layers(class_name)
    unknown = [t for t in targets if t not in names]
    if unknown:
        raise WorkbenchError(f"LoRA target {' '.join(unknown)} has no layer in {class_name}",
                             where="[lora] targets", hint=f"targets here: {' '.join(names)}")
    backbone.trainable = True
    for layer in backbone._flatten_layers(include_self=False):
        layer.trainable = False
    wanted = {names[t]: t for t in targets}
    chosen: list[Any] = []
    found: set[str] = set()
    for block in text_blocks(backbone):
        shared = kv_shared(block)
        for layer in _sublayers(block):
            target = wanted.get(layer.name)
            if target is None or (shared and target in ("k", "v")):
                continue
            chosen.append(layer)
            found.add(target)
    missing = [t for t in targets if t not in found]
    if missing:
        raise WorkbenchError(f"LoRA targets {' '.join(missing)} match no layer of {class_name}",
                             where="[lora] targets",
                             hint=f"targets found: {' '.join(t for t in targets if t in found) or 'none'}")
    with_weights = [lyr for lyr in backbone._flatten_layers(include_self=False) if lyr.weights]
    index = {id(lyr): i for i, lyr in enumerate(with_weights)}
    backbone._lora_enabled_layers = []
    backbone._lora_rank = rank
    paths = []
    for layer in chosen:
        layer.trainable = True
        if layer.name == EXPERT_BANK:
            enable_expert_lora(layer, rank, alpha)
        else:
            layer.enable_lora(rank, lora_alpha=alpha)
            backbone._lora_enabled_layers.append(index[id(layer)])  # what save_lora_weights writes
        paths.append(layer.path)
    return paths
