"""The Keras route: ModelParallel demo training, resume, A/B generation, layout and option checks."""

from __future__ import annotations

import json
import math

import pytest
from fixtures_keras import KERAS_DEMO, KERAS_DEMO_STEPS, StopOnceLogged

from adapters_lib.config import check_backend_options, config_from_dict
from adapters_lib.errors import WorkbenchError
from adapters_lib.keras_route.layout import (
    EMBEDDING,
    FFW_IN,
    FFW_OUT,
    KEY_VALUE,
    QUERY_OUT,
    ModelDims,
    plan_layout,
)

DEMO = ModelDims(vocab=1024, hidden=256, heads=4, kv_heads=1, head_dim=64, ffw=1024, layers=4)


def _cfg(**sections):
    raw = {k: dict(v) for k, v in KERAS_DEMO.items()}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw)


# --------------------------------------------------------------------------- training


def test_keras_demo_run_with_model_parallel_trains_and_loss_falls(keras_demo_run):
    run, result = keras_demo_run
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == list(range(1, KERAS_DEMO_STEPS + 1))
    losses = [m["loss"] for m in metrics]
    assert sum(losses[:5]) / 5 - sum(losses[-5:]) / 5 > 0.5, losses
    assert all(math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0 for m in metrics)
    assert all(m["tokens_per_s"] and m["lr"] > 0 for m in metrics)
    evals = [m["eval_loss"] for m in metrics if "eval_loss" in m]
    assert len(evals) == 4 and evals[-1] < evals[0]
    setup = next(e for e in run.events() if e["kind"] == "setup")
    assert setup["distribution"] == "ModelParallel" and setup["mesh"] == "2x2"
    assert any("KV head" in n for n in setup["notes"])
    assert run.status()["state"] == "completed" and result.state == "completed"
    assert sorted(int(p.name) for p in run.checkpoints_dir.iterdir() if p.name.isdigit()) == [10, 20]
    phases = [e["phase"] for e in run.events() if e["kind"] == "exact_match"]
    assert phases == ["base", "tuned"] and "eval_exact_match" in metrics[-1]


def test_stopped_keras_run_resumes_with_the_same_losses(keras_demo_run, tmp_path):
    from adapters_lib import runs
    from adapters_lib.keras_route import run_keras_training

    full, _ = keras_demo_run
    cfg = _cfg()
    run = runs.create_run(cfg, root=tmp_path)
    control = StopOnceLogged(12)
    # no exact-match hooks (the fixture's run has them): its base and tuned answers would not
    # change a loss, and the fixture's test checks them
    stopped = run_keras_training(cfg, run, control=control)
    assert stopped.state == "stopped" and stopped.step == 12 and run.status()["state"] == "stopped"
    assert control.between == 11  # served between steps, until the stop
    assert (run.checkpoints_dir / "12" / "params" / "weights.npz").is_file()
    resumed = run_keras_training(cfg, run, resume=True)
    assert resumed.state == "completed" and resumed.step == KERAS_DEMO_STEPS
    before = {m["step"]: m["loss"] for m in full.metrics()}
    steps = [m["step"] for m in run.metrics()]
    assert steps == list(range(1, KERAS_DEMO_STEPS + 1))  # one record a step, none repeated
    after = {m["step"]: m["loss"] for m in run.metrics()}
    for step in range(1, KERAS_DEMO_STEPS + 1):  # same seed, same batches: the same curve, across the stop
        assert after[step] == pytest.approx(before[step], rel=2e-3, abs=2e-3), step
    assert any(e["kind"] == "resumed" and e["step"] == 12 for e in run.events())


def test_tuned_keras_model_answers_differently_from_its_base_and_shards_only_base_kernels(keras_demo_run):
    from adapters_lib.keras_route import load_keras_tuned

    run, _ = keras_demo_run
    tuned = load_keras_tuned(run.path)
    assert tuned.step == KERAS_DEMO_STEPS
    prompts = ["Is 12 even or odd?", "Is 7 even or odd?", "What is 3 plus 4?"]
    after = tuned.answers(prompts, tuned=True, max_new_tokens=6)
    before = tuned.answers(prompts, tuned=False, max_new_tokens=6)
    assert len(after) == len(before) == 3 and after != before
    for v in tuned.model.backbone.weights:
        spec = tuple(v.value.sharding.spec)  # the layout on the real variable paths
        if "lora_kernel" in v.path or v.path.endswith("/scale"):
            assert all(a is None for a in spec), v.path
        elif v.path.endswith(("query/kernel", "attention_output/kernel", "ffw_linear/kernel")):
            assert spec[0] == "model", v.path
        elif v.path.endswith(("key/kernel", "value/kernel")):
            assert all(a is None for a in spec), v.path  # 1 KV head: replicated


def test_keras_adapter_exports_in_keras_hub_format(keras_demo_run, tmp_path):
    from adapters_lib.keras_route.export import export_keras_adapter

    run, _ = keras_demo_run
    out = export_keras_adapter(run.path, tmp_path / "adapter")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["rank"] == 8 and config["keras_layers"][:2] == ["query", "key"] and config["step"] == KERAS_DEMO_STEPS
    assert (out / "adapter.lora.h5").stat().st_size > 100_000  # 28 layers × (A, B) in f32


def test_a_mesh_that_does_not_divide_the_heads_fails_in_words_before_building(tmp_path):
    from adapters_lib import runs
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.keras_route import run_keras_training

    cfg = _cfg(mesh={"data": 1, "tensor": 8, "devices": 8})
    run = runs.create_run(cfg, root=tmp_path)
    with pytest.raises(WorkbenchError) as err:
        run_keras_training(cfg, run, hooks=default_hooks)
    assert "4 query heads do not divide over mesh.tensor 8" in str(err.value) and "\n" not in str(err.value)
    assert run.status()["state"] == "failed"


# --------------------------------------------------------------------------- layout (pure)

BASE_PATHS = {
    "token_embedding/embeddings": EMBEDDING,
    "decoder_block_0/attention/query/kernel": QUERY_OUT,
    "decoder_block_11/attention/attention_output/kernel": QUERY_OUT,
    "decoder_block_3/attention/key/kernel": KEY_VALUE,
    "decoder_block_3/attention/value/kernel": KEY_VALUE,
    "decoder_block_2/ffw_gating/kernel": FFW_IN,
    "decoder_block_2/ffw_gating_2/kernel": FFW_IN,
    "decoder_block_2/ffw_linear/kernel": FFW_OUT,
    "gemma3_backbone/decoder_block_2/ffw_linear/kernel": FFW_OUT,
}
NEVER = [
    "decoder_block_0/attention/query/lora_kernel_a", "decoder_block_0/attention/query/lora_kernel_b",
    "decoder_block_1/ffw_gating/lora_kernel_a", "decoder_block_1/ffw_linear/lora_kernel_b",
    "decoder_block_0/attention/query_norm/scale", "decoder_block_0/pre_ffw_norm/scale", "final_normalization/scale",
]


def test_layout_regexes_match_each_base_kernel_once_and_never_a_lora_kernel():
    import re

    rules = [EMBEDDING, QUERY_OUT, KEY_VALUE, FFW_IN, FFW_OUT]
    for path, rule in BASE_PATHS.items():
        assert [r for r in rules if re.search(r, path)] == [rule], path
    for path in NEVER:
        assert [r for r in rules if re.search(r, path)] == [], path


def test_layout_plan_replicates_a_single_kv_head_and_shards_the_rest():
    plan = plan_layout(DEMO, data=2, tensor=4, batch_size=8)
    assert plan.kind == "ModelParallel"
    assert KEY_VALUE not in plan.rules and plan.rules[QUERY_OUT] == ("model", None, None)
    assert plan.rules[EMBEDDING] == ("model", None) and plan.rules[FFW_IN] == (None, "model")
    assert any("1 KV head" in n for n in plan.notes)
    gqa = plan_layout(ModelDims(262144, 1152, 4, 4, 256, 6912, 26), data=1, tensor=4, batch_size=4)
    assert gqa.rules[KEY_VALUE] == ("model", None, None)
    assert plan_layout(DEMO, data=8, tensor=1, batch_size=8).kind == "DataParallel"


def test_layout_plan_says_what_does_not_divide():
    with pytest.raises(WorkbenchError, match=r"4 query heads do not divide over mesh.tensor 8 \(use mesh.tensor in 1, 2, 4\)"):
        plan_layout(DEMO, data=1, tensor=8, batch_size=8)
    with pytest.raises(WorkbenchError, match="train.batch_size 6 does not split over mesh.data 4"):
        plan_layout(DEMO, data=4, tensor=2, batch_size=6)
    odd_vocab = plan_layout(ModelDims(1001, 256, 4, 1, 64, 1024, 2), data=1, tensor=4, batch_size=4)
    assert odd_vocab.rules[EMBEDDING] == (None, "model")


# --------------------------------------------------------------------------- options (pure)


@pytest.mark.parametrize(("section", "values", "words"), [
    ("train", {"remat": True}, "train.remat is gemma-only"),
    ("train", {"grad_accum": 2}, "train.grad_accum = 2 is gemma-only"),
    ("mesh", {"fsdp": 2, "tensor": 4}, "mesh.fsdp = 2"),
    ("lora", {"dtype": "bfloat16"}, "lora.dtype = 'bfloat16' differs"),
    ("train", {"param_dtype": "bfloat16", "compute_dtype": "float32", }, "bfloat16 params with float32 compute"),
])
def test_gemma_only_options_with_the_keras_backend_give_one_line_cause(section, values, words):
    extra = {"lora": {"dtype": "bfloat16"}} if values.get("param_dtype") == "bfloat16" else {}
    with pytest.raises(WorkbenchError) as err:  # refused when the config is parsed
        check_backend_options(_cfg(**{section: values}, **extra))
    text = str(err.value)
    assert words in text and 'backend = "keras"' in text and "\n" not in text


def test_keras_options_pass_for_the_demo_config_and_mixed_precision():
    check_backend_options(_cfg())
    check_backend_options(_cfg(train={"compute_dtype": "bfloat16"}))
    check_backend_options(_cfg(lora={"enabled": False}))


def test_a_keras_source_that_is_not_a_preset_is_named(tmp_path):
    from adapters_lib.keras_route.model import model_dims

    (tmp_path / "notes.txt").write_text("no weights here\n")
    with pytest.raises(WorkbenchError, match="is not a Keras preset folder") as err:
        model_dims(_cfg(model={"source": str(tmp_path)}))
    line = str(err.value)  # what the keras route converts, not the gemma route's orbax
    assert line.startswith(f"[model] source = {str(tmp_path)!r}:"), line
    assert "model.weights.h5" in line and ".gguf" in line and "orbax" not in line, line


def test_keras_demo_tokenizer_has_the_demo_ids():
    import sentencepiece as spm

    from adapters_lib.keras_route.model import import_keras, keras_tokenizer
    from adapters_lib.models.demo import ensure_demo_tokenizer

    import_keras()
    path = str(ensure_demo_tokenizer())
    kt = keras_tokenizer(path)
    sp = spm.SentencePieceProcessor(model_file=path)
    text = "<start_of_turn>user\nWhat is 3 plus 4?<end_of_turn>\n"
    assert [int(i) for i in kt.tokenize(text)] == sp.encode(text)
    assert (kt.start_token_id, kt.end_token_id, kt.pad_token_id) == (2, 1, 0)


@pytest.mark.parametrize("warmup", [0, 3])
def test_keras_optimizer_follows_the_gemma_route_schedule(warmup):
    import numpy as np

    from adapters_lib.keras_route.model import import_keras
    from adapters_lib.keras_route.train import make_optimizer

    keras = import_keras()
    spec = _cfg(train={"warmup_steps": warmup, "learning_rate": 1e-3}).train
    opt, schedule = make_optimizer(keras, spec)
    opt.build([keras.Variable(np.zeros((2, 2), np.float32))])
    assert float(opt.learning_rate) == pytest.approx(float(schedule(0)))
    assert float(schedule(0)) == pytest.approx(1e-3 if warmup == 0 else 1e-3 / 4)


def test_keras_preset_folder_loads_with_its_tokenizer_and_lora(tmp_path):
    import numpy as np

    from adapters_lib.keras_route.model import (
        build_model,
        keras_tokenizer,
        model_dims,
        tokenizer_path,
    )

    demo = build_model(_cfg(lora={"enabled": False}), None)
    preset = tmp_path / "gemma3-demo-keras"
    demo.backbone.save_to_preset(str(preset))
    keras_tokenizer(demo.tokenizer_path).save_to_preset(str(preset))
    cfg = _cfg(model={"source": str(preset)}, mesh={"data": 1, "tensor": 1})
    assert model_dims(cfg) == demo.dims
    assert tokenizer_path(cfg).endswith("assets/tokenizer/vocabulary.spm")
    loaded = build_model(cfg, None)
    assert type(loaded.causal_lm).__name__ == "Gemma3CausalLM" and len(loaded.lora_layers) == 28
    a = demo.backbone.get_layer("token_embedding").embeddings.numpy()
    b = loaded.backbone.get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(a, b)


def test_compare_cli_works_on_a_keras_run(keras_demo_run, capsys):
    from workbench.cli import main

    run, _ = keras_demo_run
    prompts = ["Is 17 even or odd?", "What is 3 plus 4?"]
    code = main(["compare", "--in-process", "--run", str(run.path), "--prompt", prompts[0], "--json",
                 "--max-new-tokens", "8"])
    assert code == 0
    [result] = json.loads(capsys.readouterr().out)
    assert result["prompt"] == prompts[0]
    assert isinstance(result["base"], str) and isinstance(result["tuned"], str)
    assert result["settings"]["backend"] == "keras" and result["step"] == KERAS_DEMO_STEPS
    assert any(run.path.glob("compare/*.jsonl"))  # saved beside the run, as for gemma runs
