"""Keras presets on the gemma route: a Kaggle-layout preset (config.json,
model.weights.h5 or keras-hub's shards, assets/tokenizer/vocabulary.spm) is listed with its
architecture, read tensor by tensor without keras, and gives keras-hub's own logits."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from adapters_lib.errors import WorkbenchError


def _keras_logits(folder, tokens, dtype="float32"):
    """keras-hub's own forward of the preset (its CausalLM, eager)."""
    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.model import import_keras

    import_keras()
    import keras_hub

    backbone = keras_hub.models.Backbone.from_preset(str(folder), dtype=dtype)
    lm = getattr(keras_hub.models, type(backbone).__name__.replace("Backbone", "CausalLM"))(
        backbone=backbone, preprocessor=None)
    return np.asarray(lm(model_inputs(backbone, tokens, np.ones_like(tokens)))), backbone


@pytest.mark.parametrize(("kind", "family"), [("gemma2", "gemma2"), ("gemma3", "gemma3"),
                                              ("gemma4-dense", "gemma4"), ("gemma4-moe", "gemma4"),
                                              ("gemma4-e", "gemma4"), ("gemma3n", "gemma3n")])
def test_a_keras_preset_loads_on_the_gemma_route_with_keras_hubs_logits(keras_presets, kind, family):
    """Gemma 2's soft-caps and alternating window, Gemma 3's 5:1 pattern, Gemma 4's k=v global
    layers with partial rotary, its expert bank (routed on the residual, a per-dimension
    pre-norm scale) and its per-layer inputs with KV sharing (the KV-shared layers' omitted k/v
    filled as the library expects), Gemma 3n's AltUp, Laurel, per-layer inputs and KV sharing:
    the gemma modules on the converted params give keras-hub's logits (f32)."""
    import jax.numpy as jnp

    from adapters_lib.catalog import resolve
    from adapters_lib.config import check_backend_options, config_from_dict
    from adapters_lib.models import weights

    folder = keras_presets(kind)
    entry = resolve(str(folder))
    assert (entry.format, entry.family, entry.status) == ("keras-preset", family, "ok"), entry.reason
    assert entry.tokenizer.endswith("assets/tokenizer/vocabulary.spm")
    check_backend_options(config_from_dict({"model": {"source": str(folder), "backend": "gemma"}}))
    loaded = weights.load_entry(entry)
    tokens = np.random.default_rng(0).integers(3, 1024, (2, 12)).astype(np.int32)
    ours = np.asarray(loaded.model.apply({"params": loaded.params}, jnp.asarray(tokens)).logits)
    theirs, _ = _keras_logits(folder, tokens)
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=0)


def test_sharded_bfloat16_preset_reads_the_same_tensors(keras_presets, tmp_path):
    """keras-hub saves a backbone over 10 GB as ``model.weights.json`` + shards (a layer's data
    may sit in another shard than its name), and bfloat16 as 2-byte opaque data: both read back
    as the single-file float32 tensors, rounded to bfloat16."""
    import ml_dtypes

    from adapters_lib.catalog import resolve
    from adapters_lib.keras_route.model import import_keras
    from adapters_lib.models.hf import KerasPresetTensors

    import_keras()
    import keras_hub

    source = keras_presets("gemma4-moe")
    backbone = keras_hub.models.Backbone.from_preset(str(source), dtype="bfloat16")
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    backbone.save_weights(str(sharded / "model.weights.json"), max_shard_size=0.00007)  # 75 KB
    assert len(list(sharded.glob("model_*.weights.h5"))) >= 2
    shutil.copy(source / "config.json", sharded / "config.json")
    shutil.copytree(source / "assets", sharded / "assets")
    with KerasPresetTensors(source) as single, KerasPresetTensors(sharded) as parts:
        assert set(parts.where) == set(single.where) and parts.shapes() == single.shapes()
        for name in single.where:
            got = parts.get(name)
            assert got.dtype == ml_dtypes.bfloat16, name
            np.testing.assert_array_equal(got, single.get(name).astype(ml_dtypes.bfloat16), err_msg=name)
    assert resolve(str(sharded)).status == "ok"


def test_keras_presets_the_gemma_route_cannot_load_are_listed_so(keras_presets, tmp_path):
    """A Gemma 1 backbone (no post norms) is not a family the gemma route builds; a preset
    missing a tensor names it. Both are one line, and the gemma route refuses with it."""
    import json

    import h5py

    from adapters_lib.catalog import resolve
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.weights import load_from_source

    gemma1 = tmp_path / "gemma1"
    shutil.copytree(keras_presets("gemma2"), gemma1)
    config = json.loads((gemma1 / "config.json").read_text())
    config["config"].update(use_post_ffw_norm=False, use_post_attention_norm=False)
    (gemma1 / "config.json").write_text(json.dumps(config))
    entry = resolve(str(gemma1))
    assert (entry.family, entry.status) == ("other", "unsupported") and "Gemma 1" in entry.reason
    broken = tmp_path / "broken"
    shutil.copytree(keras_presets("gemma4-dense"), broken)
    with h5py.File(broken / "model.weights.h5", "a") as f:
        del f["layers/gemma4_text_decoder_block_2/ffw_linear/vars/0"]
    entry = resolve(str(broken))
    assert entry.status == "unsupported" and "layers.2.mlp.down_proj.weight missing" in entry.reason
    for source in (gemma1, broken):
        with pytest.raises(WorkbenchError) as err:
            load_from_source(ModelSpec(source=str(source)))
        assert "\n" not in str(err.value)
    assert "down_proj" in str(err.value)


@pytest.mark.parametrize("kind", ["gemma4-moe", "gemma4-e"])
def test_a_preset_written_as_hf_by_the_reader_is_keras_hubs_model_again(keras_presets, kind, tmp_path):
    """The reader's HF names and config, saved as safetensors, are what keras-hub's own HF
    converter (``convert_gemma4``) reads back to the preset's logits; the Keras route builds
    from that HF folder (its dims from the HF config) with LoRA on the expert bank."""
    from adapters_lib.config import config_from_dict
    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.model import build_model
    from adapters_lib.models.hf import KerasPresetTensors, hf_config, hf_convert, read_preset_config

    preset = keras_presets(kind)
    with KerasPresetTensors(preset) as tensors:
        hf_convert.save_hf(tmp_path, {n: tensors.get(n) for n in tensors.where},
                           hf_config(*read_preset_config(preset)))
    shutil.copy(preset / "assets" / "tokenizer" / "vocabulary.spm", tmp_path / "tokenizer.model")
    targets = ["q", "k", "v", "o", "gate", "up", "down"] + (["experts"] if kind == "gemma4-moe" else [])
    cfg = config_from_dict({"model": {"backend": "keras", "source": str(tmp_path)},
                            "mesh": {"data": 1, "tensor": 1, "devices": 1},
                            "lora": {"rank": 2, "alpha": 4, "targets": targets}})
    model = build_model(cfg, None)
    assert type(model.causal_lm).__name__ == "Gemma4CausalLM"
    assert any(p.endswith("moe_expert_bank") for p in model.lora_layers) == (kind == "gemma4-moe")
    tokens = np.random.default_rng(3).integers(3, 1024, (2, 12)).astype(np.int32)
    theirs, _ = _keras_logits(preset, tokens)
    ours = np.asarray(model.causal_lm(model_inputs(model.backbone, tokens, np.ones_like(tokens))))
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=0)  # LoRA B is zero: the base


def test_a_multimodal_gemma4_preset_gives_its_text_tower_to_both_routes(keras_presets):
    """A preset with a vision tower (as Kaggle's E2B/E4B): the catalog lists the tower, not
    trained; the gemma route loads the text tower to keras-hub's text logits; the Keras route
    builds the backbone without its towers (keras-hub's CausalLM would otherwise want pixels)
    and says so."""
    import jax.numpy as jnp

    from adapters_lib.catalog import resolve
    from adapters_lib.config import config_from_dict
    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.model import build_model
    from adapters_lib.models import weights

    folder = keras_presets("gemma4-vision")
    entry = resolve(str(folder))
    assert entry.status == "ok" and entry.towers == ("vision",) and "not trained" in entry.note
    cfg = config_from_dict({"model": {"backend": "keras", "source": str(folder)},
                            "mesh": {"data": 1, "tensor": 1, "devices": 1}, "lora": {"rank": 2}})
    model = build_model(cfg, None)
    assert model.backbone.vision_encoder is None and "pixel_values" not in model.causal_lm.input
    assert any("vision tower(s) in the checkpoint: not loaded" in n for n in model.notes)
    tokens = np.random.default_rng(4).integers(3, 1024, (2, 12)).astype(np.int32)
    theirs = np.asarray(model.causal_lm(model_inputs(model.backbone, tokens, np.ones_like(tokens))))
    loaded = weights.load_entry(entry)
    ours = np.asarray(loaded.model.apply({"params": loaded.params}, jnp.asarray(tokens)).logits)
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=0)  # LoRA B is zero: the base
