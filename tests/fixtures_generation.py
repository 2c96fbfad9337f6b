"""Generation fixtures: the demo base model with perturbed (non-zero) adapters, made once.

``demo_lora`` → (loaded, spec, adapters): the demo model, a LoRA spec on every target and
an adapter tree whose B is not zero, so that base and tuned outputs differ.
"""

from __future__ import annotations

import pytest


def perturbed_lora(loaded, spec, seed: int = 1, scale: float = 0.05):
    import jax

    from adapters_lib import lora

    tree = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(seed))
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    leaves = [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(treedef, leaves)


@pytest.fixture(scope="session")
def demo_loaded():
    import dataclasses

    import jax

    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    loaded = load_model(ModelSpec())
    # The demo base (embedding std 0.3) greedily emits one token over and over; a smaller
    # embedding (gemma's own init scale, std 0.01) gives varied text, which the sampler
    # tests need to tell streams, seeds and variants apart.
    params = jax.tree.map(lambda x: x, loaded.params)
    params["embedder"] = {"input_embedding": params["embedder"]["input_embedding"] / 30.0}
    return dataclasses.replace(loaded, params=params)


@pytest.fixture(scope="session")
def demo_lora(demo_loaded):
    from adapters_lib.config import LoraSpec

    spec = LoraSpec(rank=4, alpha=8.0)
    return demo_loaded, spec, perturbed_lora(demo_loaded, spec)
