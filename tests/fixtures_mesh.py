"""Fixtures for the mesh / train-step / memory tests: the demo model and random batches.

- ``demo``: (model, base params f32), made once per session.
- ``make_batch(B, L, seed, packed=False)``: a random token batch in the Batch contract
  (numpy); ``packed`` puts two examples in each row and pads the tail.
- ``lora_params(spec, seed)``: adapters with B non-zero, so that they change the loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def random_batch(batch: int, length: int, seed: int = 0, *, vocab: int = 1024,
                 packed: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, (batch, length)).astype(np.int32)
    seg = np.ones((batch, length), np.int32)
    pos = np.tile(np.arange(length, dtype=np.int32), (batch, 1))
    if packed:
        for b in range(batch):
            cut = int(rng.integers(2, length // 2))
            end = int(rng.integers(length - length // 4, length))
            seg[b, cut:end] = 2
            seg[b, end:] = 0
            pos[b, cut:end] = np.arange(end - cut)
            pos[b, end:] = 0
            tokens[b, end:] = 0
    targets = np.zeros_like(tokens)
    same_next = (seg[:, 1:] == seg[:, :-1]) & (seg[:, :-1] != 0)
    targets[:, :-1] = np.where(same_next, tokens[:, 1:], 0)
    loss_mask = np.zeros((batch, length), np.float32)
    loss_mask[:, :-1] = same_next
    return {"tokens": tokens, "targets": targets, "loss_mask": loss_mask, "positions": pos,
            "segment_ids": seg}


@pytest.fixture(scope="session")
def make_batch():
    return random_batch


@pytest.fixture(scope="session")
def demo() -> tuple[Any, Any]:
    from adapters_lib.models import demo as demo_mod

    return demo_mod.demo_model("float32"), demo_mod.demo_params(dtype="float32")


@pytest.fixture(scope="session")
def lora_params(demo):
    """``lora_params(spec, seed)``: adapters whose B matrices are non-zero (and small)."""
    import jax

    from adapters_lib import lora

    model, base = demo
    cache: dict[Any, Any] = {}

    def make(spec, seed: int = 1):
        key = (spec, seed)
        if key not in cache:
            fresh = lora.init_lora(model, spec, base, jax.random.key(seed))
            leaves, tree = jax.tree.flatten(fresh)
            keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
            leaves = [x + 0.02 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=True)]
            cache[key] = jax.tree.unflatten(tree, leaves)
        return cache[key]

    return make
