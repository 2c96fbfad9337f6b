"""The Keras route on a GGUF: keras-hub builds the model from the HF export of the GGUF's
dequantized weights, and it computes the gemma route's logits (the real 270M trains this way
too: README, docs/keras.md)."""

from __future__ import annotations

import numpy as np
import pytest

from adapters_lib.models import families

# 6 layers in Gemma 3's 5 local : 1 global pattern (keras-hub's Gemma 3 hard-codes it)
SIX = families.Arch("gemma3", 6, 64, 128, 4, 16, 1, 1024,
                    ("local",) * 5 + ("global",), 16, use_qk_norm=True, transpose_gating=True,
                    query_pre_attn_scalar=16, local_rope=10_000, global_rope=1_000_000)


@pytest.fixture(scope="module")
def six_layer_gguf(tmp_path_factory):
    from fixtures_gguf import write_gguf
    from fixtures_weights import tiny_params

    from adapters_lib.models import demo

    path = tmp_path_factory.mktemp("keras-gguf") / "gemma3-six-q8_0.gguf"
    return write_gguf(path, tiny_params(SIX, seed=7), SIX, tokenizer=demo.ensure_demo_tokenizer(),
                      default="Q8_0")


@pytest.mark.slow  # keras-hub + TensorFlow import and a build: ~20-60 s; the only check that
# keras-hub reads our GGUF → HF export as the gemma route reads the GGUF
def test_keras_route_builds_a_gguf_with_the_gemma_routes_logits(six_layer_gguf):
    import jax.numpy as jnp

    from adapters_lib.config import config_from_dict
    from adapters_lib.keras_route.model import build_model, model_dims, preset_dir
    from adapters_lib.models.loader import load_model

    cfg = config_from_dict({"model": {"backend": "keras", "source": str(six_layer_gguf)},
                            "lora": {"enabled": False}, "mesh": {"devices": 1}})
    dims = model_dims(cfg)
    assert (dims.layers, dims.hidden, dims.heads, dims.kv_heads, dims.vocab) == (6, 64, 4, 1, 1024)
    folder = preset_dir(cfg)
    assert (folder / "config.json").is_file() and (folder / "tokenizer.model").is_file()
    assert preset_dir(cfg) == folder  # exported once, then reused
    keras_model = build_model(cfg, None)
    ids = np.array([[2, 105, 40, 41, 42, 43, 44, 45, 106, 7]], np.int32)
    theirs = np.asarray(keras_model.causal_lm.backbone.token_embedding(
        keras_model.causal_lm.backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)}),
        reverse=True), np.float32)
    gemma = load_model(cfg.model)
    ours = np.asarray(gemma.model.apply({"params": gemma.params}, jnp.asarray(ids)).logits,
                      np.float32)
    np.testing.assert_allclose(theirs, ours, atol=2e-3, rtol=2e-3)
