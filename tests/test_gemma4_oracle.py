"""An implementation no one here wrote reads the same checkpoint: keras-hub's own Hugging Face
converter (``keras_hub.src.utils.transformers.convert_gemma4``) and model load a tiny Gemma 4
written as transformers lays it out, the workbench's loader loads the same folder into gemma's
modules, and the two give the same logits and perplexity (f32).

The MoE shape checks the routing: keras-hub (like transformers and llama.cpp) routes on the raw
residual; gemma's own block on its normalised input (``models.moe_routing`` fixes that)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _perplexity(logits: np.ndarray, tokens: np.ndarray) -> float:
    logits = logits[:, :-1].astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, tokens[:, 1:, None], -1)
    return float(np.exp(nll.mean()))


def keras_hub_logits(folder, tokens: np.ndarray, backbone: str) -> np.ndarray:
    """keras-hub's backbone from an HF folder (its converter), logits through its tied embedding
    (which soft-caps them as the model does)."""
    import keras_hub

    model = getattr(keras_hub.models, backbone).from_preset(str(folder), dtype="float32")
    positions = np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)
    inputs = {"token_ids": tokens, "padding_mask": np.ones_like(tokens)}
    if "position_ids" in {i.name for i in model.inputs}:
        inputs["position_ids"] = positions
    hidden = model(inputs)
    return np.asarray(model.get_layer("token_embedding")(hidden, reverse=True))


@pytest.mark.parametrize("kind", ["dense", "moe", "e"])
def test_keras_hubs_converter_and_ours_read_a_gemma4_checkpoint_alike(gemma4_tiny, kind, tmp_path):
    import jax
    import jax.numpy as jnp

    from adapters_lib.models import families, hf_convert, weights

    arch, model, params = gemma4_tiny[kind]
    hf_convert.save_hf(tmp_path, hf_convert.gemma_to_hf(params, arch=arch), families.hf_config_for(arch))
    read = families.from_hf_config(json.loads((tmp_path / "config.json").read_text()))
    loaded = weights.load_hf_params(tmp_path, read, "float32", None)
    tokens = np.random.default_rng(7).integers(1, arch.vocab_size, (2, 12)).astype(np.int32)
    ours = np.asarray(jax.jit(lambda p: families.model_class(read)(dtype=jnp.float32).apply(
        {"params": p}, jnp.asarray(tokens)).logits)(loaded))
    theirs = keras_hub_logits(tmp_path, tokens, "Gemma4Backbone")
    assert theirs.shape == ours.shape
    np.testing.assert_allclose(ours, theirs, atol=2e-5 * max(1.0, float(np.abs(theirs).max())))
    assert _perplexity(ours, tokens) == pytest.approx(_perplexity(theirs, tokens), rel=1e-5)
