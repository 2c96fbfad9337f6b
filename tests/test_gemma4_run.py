"""A Gemma 4 MoE run end to end on the gemma route: an HF folder with its tokenizer is a catalog
model; the trainer trains LoRA on every target and the expert bank (train step, eval,
checkpoint), the loss falls; compare's A/B differs after training, its tuned side is the fused
model's answer; ``export --format adapter`` writes the experts in PEFT's layout."""

from __future__ import annotations

import json
import shutil

from fixtures_runs import demo_overrides


def test_a_moe_run_trains_the_experts_and_exports_them(gemma4_tiny, gemma4_tokenizer, tmp_path):
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.models import families
    from adapters_lib.models.hf import hf_convert, safetensors_io
    from adapters_lib.train.loop import run_training
    from adapters_lib.tuned import export_run

    arch, _, params = gemma4_tiny["moe"]
    folder = tmp_path / "gemma-4-moe-tiny"
    hf_convert.save_hf(folder, hf_convert.gemma_to_hf(params, arch=arch), families.hf_config_for(arch))
    shutil.copy(gemma4_tokenizer, folder / "tokenizer.model")
    targets = '["q", "k", "v", "o", "gate", "up", "down", "experts"]'
    cfg = load_config(None, demo_overrides(run__name='"moe"', run__dir=f'"{tmp_path / "runs"}"',
                                           model__source=f'"{folder}"', lora__targets=targets,
                                           train__steps=4, train__eval_every=2, train__checkpoint_every=4))
    run = runs.create_run(cfg)
    result = run_training(cfg, run, hooks=default_hooks)
    assert result.state == "completed", result
    losses = [m["loss"] for m in run.metrics() if "loss" in m]
    evals = [m["eval_loss"] for m in run.metrics() if "eval_loss" in m]
    assert len(losses) == 4 and losses[-1] < losses[0] and evals[-1] < evals[0]
    out = export_run(run.path, "adapter", out=tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["target_parameters"] == ["experts.gate_up_proj", "experts.down_proj"]
    names = safetensors_io.SafetensorsDir(tmp_path / "adapter").where
    assert "base_model.model.model.layers.0.experts.base_layer.lora_A.weight" in names
    assert out["step"] == 4
    from test_gemma4_sampling import _greedy_without_cache

    from adapters_lib.export.merged import merged_params
    from adapters_lib.sample import Sampler, SamplingSettings
    from adapters_lib.sample.text_stream import TextStream
    from adapters_lib.tuned import load_run_model

    tuned = load_run_model(run.path)  # compare: one batched generation, a side per variant
    prompts = ["apple river stone"]
    ab = tuned.generate({"base": prompts, "tuned": prompts}, SamplingSettings(max_new_tokens=8))
    assert ab["base"][0].text != ab["tuned"][0].text
    # the fused model's greedy answer by its full forward at each step (one program; a Sampler
    # of its own would compile a prefill and a decoder), made text as the sampler makes it
    fused = merged_params(tuned.loaded, tuned.adapters, tuned.lora)
    ids = Sampler(tuned.loaded.model, fused, tuned.loaded.tokenizer)  # its prompt ids and stops
    alone = _greedy_without_cache(tuned.loaded.model, fused, ids.encode(prompts[0]), 8, ids.end_tokens)
    stream = TextStream(tuned.loaded.tokenizer)
    assert "".join(stream.push(t) for t in alone) + stream.flush() == ab["tuned"][0].text
