"""Export: fusing is exact, the PEFT layout matches HF's, adapters and merged weights round-trip."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.cli import main

TOKENS = [[2, 105, 371, 117, 489, 975, 1005, 488, 387, 486, 999, 106, 117, 105, 370, 117]]


def _qkv_model():
    """A demo-sized model with as many KV heads as heads: gemma uses ``qkv_einsum`` then."""
    import dataclasses

    import jax.numpy as jnp

    from adapters_lib.models import demo

    cfg = dataclasses.replace(demo.demo_transformer_config(), num_kv_heads=4)
    return demo.demo_model_class()(config=cfg, dtype=jnp.float32)


@pytest.mark.parametrize("targets", [("q",), ("k",), ("v",), ("o",), ("gate",), ("up",), ("down",),
                                     ("q", "k", "v", "o", "gate", "up", "down"), "qkv-model"])
def test_fused_weights_give_the_logits_of_base_plus_adapters(demo_loaded, targets):
    import jax
    import jax.numpy as jnp
    from fixtures_generation import perturbed_lora

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.export import merged_params

    if targets == "qkv-model":
        model = _qkv_model()
        params = jax.jit(lambda r: model.init(r, jnp.zeros((1, 8), jnp.int32))["params"])(jax.random.key(0))
        loaded = SimpleNamespace(model=model, params=params, config=model.config)
        assert "qkv_einsum" in params["layer_0"]["attn"]
        targets = ("q", "k", "v", "o")
    else:
        loaded = demo_loaded
    spec = LoraSpec(rank=4, alpha=8.0, targets=targets)
    adapters = perturbed_lora(loaded, spec, scale=0.05)
    tokens = jnp.asarray(TOKENS)
    want = lora.wrap(loaded.model, spec).apply({"params": lora.merge_lora(loaded.params, adapters)}, tokens).logits
    fused = merged_params(loaded, adapters, spec)
    got = loaded.model.apply({"params": fused}, tokens).logits
    base = loaded.model.apply({"params": loaded.params}, tokens).logits
    assert float(jnp.abs(want - base).max()) > 1e-2  # the adapters matter
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)  # f32: 1e-5 absolute or relative


def test_peft_tensors_are_the_update_hf_applies_to_its_weights(demo_lora):
    """W_hf + (alpha/r)·lora_B @ lora_A, converted back to gemma, is our fused tree."""
    from adapters_lib import lora
    from adapters_lib.export import adapter_config, adapter_tensors, merged_params
    from adapters_lib.models import families
    from adapters_lib.models.hf import hf_convert

    loaded, spec, adapters = demo_lora
    peft = adapter_tensors(adapters)
    cfg = adapter_config(spec, "demo")
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and not cfg["fan_in_fan_out"]
    assert cfg["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    q_a = peft["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    q_b = peft["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    assert q_a.shape == (4, 256) and q_b.shape == (4 * 64, 4)  # (r, in), (N·H, r)
    assert len(peft) == 2 * 7 * 4
    arch = families.arch_from_transformer_config(loaded.config, "gemma3")
    hf = hf_convert.gemma_to_hf(lora.merge_lora(loaded.params, {}), arch=arch)
    scale = cfg["lora_alpha"] / cfg["r"]
    for name in list(hf):
        module = name[len("model."):-len(".weight")]
        a = peft.get(f"base_model.model.model.{module}.lora_A.weight")
        if a is not None:
            b = peft[f"base_model.model.model.{module}.lora_B.weight"]
            hf[name] = (hf[name].astype(np.float64) + scale * (b.astype(np.float64) @ a)).astype(np.float32)
    back = hf_convert.hf_to_gemma(hf, arch)
    fused = merged_params(loaded, adapters, spec)
    import jax

    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(fused)[0], jax.tree.leaves(back), strict=True):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=1e-5, err_msg=jax.tree_util.keystr(path))


@pytest.fixture(scope="module")
def tuned_run(trained_demo_run):
    from adapters_lib.tuned import load_checkpoint

    return load_checkpoint(trained_demo_run)  # (cfg, loaded, adapters, step)


@pytest.fixture(scope="module")
def exports(trained_demo_run, tmp_path_factory):
    from adapters_lib.tuned import export_run

    out = tmp_path_factory.mktemp("exports")
    return {fmt: Path(export_run(trained_demo_run, fmt, out=out / fmt)["out"]) for fmt in ("adapter", "gemma", "hf")}


def test_exported_adapter_reloads_and_reproduces_the_runs_tuned_output(trained_demo_run, exports):
    import jax

    from adapters_lib.sample import SamplingSettings
    from adapters_lib.tuned import load_adapter_model, load_run_model

    from_run = load_run_model(str(trained_demo_run))
    trainable, step = from_run.adapters, from_run.step
    from_dir = load_adapter_model(str(exports["adapter"]))
    assert jax.tree.structure(from_dir.adapters) == jax.tree.structure(trainable)
    assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(from_dir.adapters), jax.tree.leaves(trainable), strict=True))
    assert from_dir.sampler.spec == from_run.sampler.spec
    prompts = ["Is 133 even or odd?", "Say the first word: piano river stone"]
    settings = SamplingSettings(max_new_tokens=8)
    assert [r["tuned"] for r in from_dir.compare(prompts, settings)] == \
        [r["tuned"] for r in from_run.compare(prompts, settings)]
    config = json.loads((exports["adapter"] / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "demo" and step == 40
    base = json.loads((exports["adapter"] / "gemma_workbench.json").read_text())
    assert base["source"] == "demo" and base["quantize"] == "none"


def test_a_starter_export_names_a_resolvable_base_and_the_exact_file_it_was_trained_on():
    from adapters_lib.export.provenance import base_record, hub_id
    from adapters_lib.models import starter

    assert hub_id("starter:gemma-3-270m") == "google/gemma-3-270m"
    assert hub_id("hf:google/gemma-2-2b-it") == "google/gemma-2-2b-it"
    assert hub_id("hf:google/gemma-2-2b-it@0123abcd") == "google/gemma-2-2b-it"
    assert hub_id("kaggle:google/gemma-3/flax/gemma3-1b-it/1") == "kaggle:google/gemma-3/flax/gemma3-1b-it/1"
    record = base_record("starter:gemma-3-270m")
    assert record["hub_id"] == "google/gemma-3-270m" and record["format"] == "gguf"
    assert record["quantization"] == "Q4_K_M" and record["sha256"] == starter.EXPECTED_SHA256
    assert "dequantized" in record["note"]


def test_gemma_export_loads_with_gm_load_params_and_gives_the_same_logits(tuned_run, exports):
    import jax.numpy as jnp
    from gemma import gm

    from adapters_lib import lora

    cfg, loaded, trainable, _ = tuned_run
    params = gm.ckpts.load_params(exports["gemma"])
    tokens = jnp.asarray(TOKENS)
    want = lora.wrap(loaded.model, cfg.lora).apply({"params": lora.merge_lora(loaded.params, trainable)},
                                                   tokens).logits
    got = loaded.model.apply({"params": params}, tokens).logits
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)  # f32: 1e-5 absolute or relative
    # and the folder is a model of its own (`sample --model DIR`): the tokenizer is beside it
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    again = load_model(ModelSpec(source=f"local:{exports['gemma']}"))
    assert again.tokenizer_path == str(exports["gemma"] / "tokenizer.model")
    got = again.model.apply({"params": again.params}, tokens).logits
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)


def test_hf_export_writes_safetensors_and_a_config_that_convert_back(tuned_run, exports):
    import jax

    from adapters_lib.export import merged_params
    from adapters_lib.models import families
    from adapters_lib.models.hf import hf_convert, safetensors_io

    cfg, loaded, trainable, _ = tuned_run
    config = json.loads((exports["hf"] / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["num_hidden_layers"] == 4
    theirs = _transformers_config(config)  # transformers itself reads it (5.24 refused 64.0)
    assert type(theirs).__name__ == "Gemma3TextConfig" and theirs.query_pre_attn_scalar == 64
    assert (exports["hf"] / "tokenizer.model").is_file()
    file = exports["hf"] / "model.safetensors"
    header = safetensors_io.read_header(file)
    tensors = {k: safetensors_io.read_tensor(file, header, k) for k in header if not k.startswith("__")}
    arch = families.arch_from_transformer_config(loaded.config, "gemma3")
    back = hf_convert.hf_to_gemma(tensors, arch)
    fused = merged_params(loaded, trainable, cfg.lora)
    for x, y in zip(jax.tree.leaves(fused), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def _transformers_config(config: dict):
    """``config.json`` as transformers builds it (its config classes need no torch)."""
    import transformers

    return transformers.AutoConfig.for_model(**json.loads(json.dumps(config)))


@pytest.mark.parametrize("name", ["gemma2-2b", "gemma3-270m", "gemma3-1b", "demo"])
def test_an_hf_config_from_any_arch_source_is_one_transformers_reads(name):
    """The archs read from an HF config, a GGUF or a gemma ``TransformerConfig`` hold
    ``query_pre_attn_scalar`` as a float; the ``config.json`` written from them must still be
    one transformers' strict config classes take (an int there), with the same values."""
    from adapters_lib.models import demo, families

    if name == "demo":
        arch = families.arch_from_transformer_config(demo.demo_transformer_config(), "gemma3")
    else:
        family, size = name.split("-")
        arch = families.from_hf_config(families.hf_config_for(families.KNOWN[(family, size)][1]))
    assert isinstance(arch.query_pre_attn_scalar, float)
    config = families.hf_config_for(arch)
    theirs = _transformers_config(config)
    assert theirs.query_pre_attn_scalar == arch.query_pre_attn_scalar
    assert isinstance(config["query_pre_attn_scalar"], int)
    assert (theirs.num_hidden_layers, theirs.head_dim, theirs.sliding_window) == \
        (arch.num_layers, arch.head_dim, arch.sliding_window)
    assert families.from_hf_config(json.loads(json.dumps(config))) == arch


def _one_line_error(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_missing_checkpoint_names_the_steps_there_are(trained_demo_run, capsys, tmp_path):
    err = _one_line_error(capsys, ["export", "--in-process", str(trained_demo_run), "--step", "7",
                                   "--out", str(tmp_path / "x")])
    assert "step 7" in err and "20, 40" in err


def test_an_adapter_for_another_base_model_names_the_tensor_and_both_shapes(exports, capsys, tmp_path):
    from adapters_lib.models.hf import safetensors_io

    src = exports["adapter"] / "adapter_model.safetensors"
    header = safetensors_io.read_header(src)
    tensors = {k: np.array(safetensors_io.read_tensor(src, header, k)) for k in header if not k.startswith("__")}
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    tensors[name] = np.zeros((tensors[name].shape[0], 512), np.float32)  # a wider model's q_proj
    bad = tmp_path / "bad-adapter"
    bad.mkdir()
    safetensors_io.write_safetensors(bad / "adapter_model.safetensors", tensors)
    (bad / "adapter_config.json").write_text((exports["adapter"] / "adapter_config.json").read_text())
    err = _one_line_error(capsys, ["sample", "--in-process", "--adapter", str(bad), "--prompt", "Is 5 even or odd?"])
    assert name in err and "(8, 512)" in err and "(8, 256)" in err


def test_an_empty_prompt_is_a_one_line_error(capsys):
    err = _one_line_error(capsys, ["sample", "--in-process", "--prompt", "  "])
    assert "prompt is empty" in err
