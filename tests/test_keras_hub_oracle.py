"""An implementation no one here wrote reads the same checkpoint: keras-hub's own Hugging Face
converters (``keras_hub.src.utils.transformers.convert_gemma4`` / ``convert_gemma3n``) and
models load a tiny Gemma 4 (dense, MoE, E-style) or Gemma 3n written as transformers lays it
out, the workbench's loader loads the same folder into gemma's modules, and the two give the
same logits, and ``eval``'s perplexity is keras-hub's (f32).

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


def eval_perplexity(model, params, tokens: np.ndarray) -> float:
    """The perplexity ``gemma-workbench eval`` computes (``perplexity._scorer``: the final hidden
    states through the chunked, soft-capped cross-entropy), every next token scored."""
    import math

    from adapters_lib.evals import perplexity
    from adapters_lib.memory.estimate import ce_chunk_budget

    rows, length = tokens.shape
    batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:],
             "positions": np.broadcast_to(np.arange(length - 1, dtype=np.int32), (rows, length - 1)),
             "segment_ids": np.ones((rows, length - 1), np.int32),
             "loss_mask": np.ones((rows, length - 1), np.float32)}
    nll, count = perplexity._scorer(model, None, ce_chunk_budget())(params, None, batch)  # noqa: SLF001
    return math.exp(float(nll) / float(count))


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

    from adapters_lib.models import families, weights
    from adapters_lib.models.hf import hf_convert

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
    model = families.model_class(read)(dtype=jnp.float32)
    assert eval_perplexity(model, loaded, tokens) == pytest.approx(_perplexity(theirs, tokens), rel=1e-5)


def keras_hub_3n_logits(folder, text: dict, tokens: np.ndarray) -> np.ndarray:
    """keras-hub's Gemma 3n text model, its weights ported by keras-hub's own converter
    (``convert_gemma3n._port_language_model``, the text part of ``Gemma3nBackbone``'s; the full
    backbone would build the MobileNet and audio towers too), logits through its tied embedding."""
    from keras_hub.src.models.gemma3n.gemma3n_text_model import Gemma3nTextModel
    from keras_hub.src.utils.transformers import convert_gemma3n
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    rope = text["rope_parameters"]
    lm = Gemma3nTextModel(
        pad_token_id=0, vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
        num_hidden_layers=text["num_hidden_layers"], rms_norm_eps=text["rms_norm_eps"],
        num_attention_heads=text["num_attention_heads"], num_key_value_heads=text["num_key_value_heads"],
        head_dim=text["head_dim"], attention_bias=False, attention_dropout=0.0, layer_types=text["layer_types"],
        sliding_window=text["sliding_window"], rope_theta=rope["full_attention"]["rope_theta"], rope_scaling=None,
        rope_local_base_freq=rope["sliding_attention"]["rope_theta"], max_position_embeddings=64,
        intermediate_size=text["intermediate_size"], hidden_activation="gelu_approximate",
        activation_sparsity_pattern=text["activation_sparsity_pattern"], altup_num_inputs=text["altup_num_inputs"],
        altup_coef_clip=text["altup_coef_clip"], altup_active_idx=0, altup_correct_scale=True,
        laurel_rank=text["laurel_rank"], hidden_size_per_layer_input=text["hidden_size_per_layer_input"],
        vocab_size_per_layer_input=text["vocab_size_per_layer_input"],
        num_kv_shared_layers=text["num_kv_shared_layers"], final_logit_soft_cap=text["final_logit_softcapping"],
        dtype="float32")

    def run():
        embeds = lm.embed_tokens(tokens)
        per_layer = lm.project_per_layer_inputs(embeds, lm.get_per_layer_inputs(tokens))
        return lm(tokens, np.ones_like(tokens), embeds, per_layer)

    run()  # builds the weights

    class Backbone:
        language_model = lm

    with SafetensorLoader(str(folder)) as loader:
        convert_gemma3n._port_language_model(loader, Backbone)
    return np.asarray(lm.token_embedding(run(), reverse=True))


def test_keras_hubs_converter_and_ours_read_a_gemma3n_checkpoint_alike(gemma3n_tiny, tmp_path):
    """transformers' multimodal layout (``model.language_model.``, 256 padded rows, every layer's
    k/v as the release holds them): keras-hub's logits (its extra rows sliced off) are ours."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models import families, weights
    from adapters_lib.models.hf import hf_convert

    arch, model, params = gemma3n_tiny
    text = families.hf_config_for(arch)
    tensors = {"model.language_model." + k[len("model."):]: v
               for k, v in hf_convert.gemma_to_hf(params, arch=arch).items()}
    hf_convert.save_hf(tmp_path, tensors, {"architectures": ["Gemma3nForConditionalGeneration"],
                                           "model_type": "gemma3n", "text_config": text})
    read = families.from_hf_config(json.loads((tmp_path / "config.json").read_text()))
    loaded = weights.load_hf_params(tmp_path, read, "float32", None)
    tokens = np.random.default_rng(7).integers(1, arch.vocab_size, (2, 12)).astype(np.int32)
    ours = np.asarray(jax.jit(lambda p: families.model_class(read)(dtype=jnp.float32).apply(
        {"params": p}, jnp.asarray(tokens)).logits)(loaded))
    theirs = keras_hub_3n_logits(tmp_path, text, tokens)
    assert theirs.shape == (*ours.shape[:2], arch.vocab_size + 256)
    theirs = theirs[..., :arch.vocab_size]
    np.testing.assert_allclose(ours, theirs, atol=2e-5 * max(1.0, float(np.abs(theirs).max())))
    model = families.model_class(read)(dtype=jnp.float32)
    assert eval_perplexity(model, loaded, tokens) == pytest.approx(_perplexity(theirs, tokens), rel=1e-5)
