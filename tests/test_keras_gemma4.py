"""The Keras route on Gemma 4 (dense, MoE, E-style) and Gemma 3n: keras-hub's own
``Gemma4CausalLM``/``Gemma3nCausalLM`` built from tiny random-init presets in the Kaggle Keras
layout, LoRA on the text blocks (the expert bank included), the ModelParallel layout, a run
that trains, checkpoints, resumes, answers and exports."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fixtures_keras import StopOnceLogged, keras_g4_config

TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def _loss_and_grads(model, tokens):
    """A jitted (loss, grads) of the trainable variables over ``model``'s stateless call."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.keras_route.backbones import model_inputs

    lm = model.causal_lm
    x = model_inputs(model.backbone, tokens[:, :-1], np.ones_like(tokens[:, :-1]))
    ntv = [v.value for v in lm.non_trainable_variables]

    def loss(tv):
        logits, _ = lm.stateless_call(tv, ntv, x)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))

    return jax.jit(jax.value_and_grad(loss))


ONE = {"data": 1, "tensor": 1, "devices": 1}
LORA = {"rank": 2, "alpha": 4, "targets": TARGETS}


@pytest.fixture(scope="module")
def lora_models(keras_presets):
    """``lora_models(kind)`` → the preset built on one device with rank-2 LoRA on every text
    target, once for the tests below (they only read it: their steps are stateless calls)."""
    from adapters_lib.keras_route.model import build_model

    made: dict[str, object] = {}

    def get(kind: str):
        if kind not in made:
            made[kind] = build_model(keras_g4_config(keras_presets(kind), mesh=ONE, lora=LORA), None)
        return made[kind]

    return get


@pytest.mark.parametrize("kind", ["gemma4-dense", "gemma3n"])
def test_lora_on_the_text_blocks_lowers_the_loss(lora_models, kind):
    """Gemma 4's k=v global layers get a ``key`` adapter (it serves both, there is no value
    layer); Gemma 3n's KV-shared blocks get no k/v adapter (their own K/V are never used)."""
    model = lora_models(kind)
    lm = model.causal_lm
    assert type(lm).__name__ == ("Gemma3nCausalLM" if kind == "gemma3n" else "Gemma4CausalLM")
    paths = [v.path for v in lm.trainable_variables]
    assert paths and all("lora_kernel" in p for p in paths)  # the base is frozen
    kv = [p for p in paths if any(f"/{n}/lora" in p for n in ("key", "value", "k_proj", "v_proj"))]
    if kind == "gemma4-dense":  # global layers 1, 3 are k=v: a key adapter, no value layer
        assert any(p.startswith("decoder_block_1/attention/key/") for p in kv)
        assert not any(p.startswith("decoder_block_1/attention/value/") for p in kv)
    else:  # the last two blocks share an earlier block's K/V
        assert kv and not any("decoder_block_2/" in p or "decoder_block_3/" in p for p in kv)
    tokens = np.random.default_rng(1).integers(3, 1024, (2, 16)).astype(np.int32)
    step = _loss_and_grads(model, tokens)
    tv = [v.value for v in lm.trainable_variables]
    first, _ = step(tv)
    for _ in range(6):
        _, grads = step(tv)
        tv = [p - 0.5 * g for p, g in zip(tv, grads, strict=True)]
    assert float(step(tv)[0]) < float(first) - 0.02


def test_kv_shared_blocks_of_a_gemma4_e_model_get_no_kv_adapter(lora_models):
    """keras-hub's Gemma 4 KV-shared blocks own no K/V (they borrow an earlier block's): the
    ``k``/``v`` targets adapt the others only; the per-layer-input table stays frozen."""
    paths = [v.path for v in lora_models("gemma4-e").causal_lm.trainable_variables]
    kv = [p for p in paths if "/key/lora" in p or "/value/lora" in p]
    assert {p.split("/")[0] for p in kv} == {"decoder_block_0", "decoder_block_1"}
    assert any(p.startswith("decoder_block_3/attention/query/") for p in paths)
    assert all("lora_kernel" in p for p in paths) and not any("per_layer" in p for p in paths)


def test_moe_experts_train_and_a_2x2_model_parallel_step_equals_1_device(keras_presets):
    """The expert bank gets adapters of its own (the router and per-expert scale stay frozen);
    every expert adapter gets a gradient; on a (2,2) batch×model mesh the bank is split by
    expert and the step (loss, every gradient) equals the 1-device step; a few steps lower the
    loss and move every expert adapter."""
    import jax.numpy as jnp

    from adapters_lib.keras_route.layout import make_distribution, plan_for
    from adapters_lib.keras_route.model import build_model, model_dims

    preset = keras_presets("gemma4-moe")
    one = keras_g4_config(preset, mesh={"data": 1, "tensor": 1, "devices": 1})
    four = keras_g4_config(preset, mesh={"data": 2, "tensor": 2, "devices": 4})
    tokens = np.random.default_rng(2).integers(3, 1024, (4, 16)).astype(np.int32)
    model = build_model(one, None)
    lm = model.causal_lm
    names = [v.path for v in lm.trainable_variables]
    bank = [n for n in names if "/moe_expert_bank/" in n]
    assert len(bank) == 4 * 6 and not any("router" in n or "per_expert_scale" in n for n in names)
    b_init = {v.path: np.asarray(v.value) for v in lm.trainable_variables}
    step = _loss_and_grads(model, tokens)
    loss, grads = step([v.value for v in lm.trainable_variables])
    g = dict(zip(names, grads, strict=True))
    for name in bank:
        if name.endswith("_b"):  # B is zero at the start: A's gradient is zero, B's is not
            assert float(jnp.abs(g[name]).sum()) > 0, name
            assert not b_init[name].any()

    plan = plan_for(four, model_dims(four))
    dist = make_distribution(plan)
    sharded = build_model(four, dist)
    specs = {v.path: tuple(v.value.sharding.spec) for v in sharded.backbone.weights}
    assert specs["decoder_block_0/moe_expert_bank/gate_proj"][0] == "model"
    assert specs["decoder_block_0/moe_expert_bank/down_proj"][0] == "model"
    assert specs["decoder_block_0/attention/query/kernel"][0] == "model"
    assert all(a is None for a in specs["decoder_block_0/moe_expert_bank/lora_experts_gate_a"])
    assert all(a is None for a in specs["decoder_block_0/attention/query/lora_kernel_a"])
    with dist.scope():
        tv = [v.value for v in sharded.causal_lm.trainable_variables]
        loss4, grads4 = _loss_and_grads(sharded, tokens)(tv)
    np.testing.assert_allclose(float(loss4), float(loss), rtol=1e-6)
    for name, a, b in zip(names, grads, grads4, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6, err_msg=name)
    tv = [v.value for v in lm.trainable_variables]
    for _ in range(6):
        _, grads = step(tv)
        tv = [p - 0.5 * g for p, g in zip(tv, grads, strict=True)]
    after = dict(zip(names, tv, strict=True))
    assert float(step(tv)[0]) < float(loss) - 0.02
    assert all(np.abs(np.asarray(after[n])).sum() > 0 for n in bank if n.endswith("_b"))


# --------------------------------------------------------------------------- the route, end to end


def test_gemma4_moe_run_trains_checkpoints_the_experts_and_records_the_layout(keras_gemma4_run):
    run, result = keras_gemma4_run
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == list(range(1, 7)) and result.state == "completed"
    assert all(math.isfinite(m["loss"]) and m["grad_norm"] > 0 for m in metrics)
    assert len([m for m in metrics if "eval_loss" in m]) == 2
    setup = next(e for e in run.events() if e["kind"] == "setup")
    assert setup["distribution"] == "ModelParallel" and setup["mesh"] == "2x2"
    assert any("expert bank: 4 experts split over the 2-way model axis" in n for n in setup["notes"])
    with np.load(run.checkpoints_dir / "6" / "params" / "weights.npz") as saved:
        experts = [k for k in saved.files if "/lora_experts_" in k]
        assert len(experts) == 4 * 6
        assert all(np.abs(saved[k]).sum() > 0 for k in experts if k.endswith("_b"))  # trained


def test_one_device_run_stopped_and_resumed_matches_the_model_parallel_run(keras_gemma4_run, keras_presets,
                                                                             tmp_path):
    """The same config on one device, stopped after step 3 and resumed: every step's loss is
    the 2×2 ModelParallel run's (the resume restores weights, optimizer and data position;
    the layout changes no number beyond float rounding)."""
    from adapters_lib import runs
    from adapters_lib.keras_route import run_keras_training

    full, _ = keras_gemma4_run
    cfg = keras_g4_config(keras_presets("gemma4-moe"), mesh={"data": 1, "tensor": 1, "devices": 1})
    run = runs.create_run(cfg, root=tmp_path)
    stopped = run_keras_training(cfg, run, control=StopOnceLogged(3))  # no exact-match hooks
    assert stopped.state == "stopped" and stopped.step == 3
    resumed = run_keras_training(cfg, run, resume=True)
    assert resumed.state == "completed" and resumed.step == 6
    want = {m["step"]: m["loss"] for m in full.metrics()}
    got = {m["step"]: m["loss"] for m in run.metrics()}
    assert sorted(got) == list(range(1, 7))
    for step in range(1, 7):
        assert got[step] == pytest.approx(want[step], rel=2e-3, abs=2e-3), step


def test_compare_and_export_work_on_a_gemma4_keras_run(keras_gemma4_run, capsys, tmp_path):
    import h5py

    from adapters_lib.keras_route.export import export_keras_adapter
    from workbench.cli import main

    run, _ = keras_gemma4_run
    code = main(["compare", "--in-process", "--run", str(run.path), "--prompt", "What is 3 plus 4?",
                 "--prompt", "Is 7 even or odd?", "--json", "--max-new-tokens", "8"])
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in results] == [6, 6] and results[0]["settings"]["backend"] == "keras"
    assert any(r["base"] != r["tuned"] for r in results)
    out = export_keras_adapter(run.path, tmp_path / "adapter")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["keras_layers"][-1] == "moe_expert_bank" and config["rank"] == 4
    with h5py.File(out / "adapter.lora.h5") as f:
        assert "lora" in f and len(f["lora"].keys()) > 1  # keras-hub's own adapters (and its rank)
        flat: list[str] = []
        f["lora_experts"].visit(lambda name: flat.append(name) if isinstance(f["lora_experts"][name], h5py.Dataset) else None)
        assert len(flat) == 4 * 6


def test_layout_plan_covers_the_expert_bank_and_the_per_layer_table():
    from adapters_lib.keras_route.layout import (
        DENSE_IN_SHARDED,
        DENSE_OUT_SHARDED,
        EXPERTS_IN,
        EXPERTS_OUT,
        PER_LAYER_TABLE,
        ModelDims,
        plan_layout,
    )

    moe = ModelDims(1024, 32, 2, 1, 8, 64, 4, global_kv_heads=1, experts=4, expert_dim=16)
    plan = plan_layout(moe, data=1, tensor=2, batch_size=2)
    assert plan.rules[EXPERTS_IN] == plan.rules[EXPERTS_OUT] == ("model", None, None)
    odd = plan_layout(ModelDims(1024, 32, 4, 1, 8, 64, 4, experts=6, expert_dim=16), data=1, tensor=4, batch_size=4)
    assert odd.rules[EXPERTS_IN] == (None, None, "model") and odd.rules[EXPERTS_OUT] == (None, "model", None)
    e3n = ModelDims(1024, 32, 2, 1, 8, 64, 4, per_layer=8, per_layer_vocab=1024, dense_kernels=True)
    plan = plan_layout(e3n, data=1, tensor=2, batch_size=2)
    assert plan.rules[DENSE_OUT_SHARDED] == (None, "model") and plan.rules[DENSE_IN_SHARDED] == ("model", None)
    assert plan.rules[PER_LAYER_TABLE] == (None, "model")
    import re

    rules = list(plan_layout(moe, data=1, tensor=2, batch_size=2).rules)
    for path in ("decoder_block_0/moe_expert_bank/lora_experts_gate_a", "decoder_block_0/moe_expert_bank/per_expert_scale",
                 "decoder_block_0/moe_router/proj/kernel", "decoder_block_0/attention/query/lora_kernel_a"):
        assert not [r for r in rules if re.search(r, path)], path


def test_an_int8_base_stays_near_the_float_forward_and_lora_trains_on_it(keras_presets, lora_models):
    """``[model] quantize = "int8"``: Keras' own ``quantize("int8")`` holds the attention
    kernels and the embedding in int8 (scales beside them); Gemma 4's FFW kernels stay float
    (keras-hub's block reads them without the scale). The logits stay within 5 % (relative L2;
    measured 1.2 % on this random model) of the float model's, and LoRA lowers the loss."""
    import jax

    from adapters_lib.keras_route.backbones import model_inputs
    from adapters_lib.keras_route.model import build_model

    tokens = np.random.default_rng(5).integers(3, 1024, (2, 16)).astype(np.int32)
    float_model = lora_models("gemma4-dense")
    model = build_model(keras_g4_config(keras_presets("gemma4-dense"), mesh=ONE, lora=LORA,
                                        model={"quantize": "int8"}), None)
    dtypes = {v.path: str(v.dtype) for v in model.backbone.weights}
    assert dtypes["decoder_block_0/attention/query/kernel"] == "int8"
    assert dtypes["token_embedding/embeddings"] == "int8"
    assert dtypes["decoder_block_0/ffw_gating/kernel"] == "float32"
    assert any("ffw_gating/ffw_gating_2/ffw_linear stay float" in n for n in model.notes)
    x = model_inputs(model.backbone, tokens, np.ones_like(tokens))

    def state(lm):
        return [v.value for v in lm.trainable_variables], [v.value for v in lm.non_trainable_variables]

    # both forwards in one jitted program (eager, the int8 layers' ops compiled one by one)
    ref, got = jax.jit(lambda a, b, x: (float_model.causal_lm.stateless_call(*a, x)[0],
                                        model.causal_lm.stateless_call(*b, x)[0]))(
        state(float_model.causal_lm), state(model.causal_lm), x)
    ref, got = np.asarray(ref), np.asarray(got)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
    step = _loss_and_grads(model, tokens)
    tv = [v.value for v in model.causal_lm.trainable_variables]
    first, _ = step(tv)
    for _ in range(6):
        _, grads = step(tv)
        tv = [p - 0.5 * g for p, g in zip(tv, grads, strict=True)]
    assert float(step(tv)[0]) < float(first) - 0.02


def test_an_hf_gemma3n_on_the_keras_route_is_refused_in_one_line(gemma3n_tiny, tmp_path):
    """keras-hub's HF converter builds Gemma 3n only with its vision and audio towers' configs:
    a text checkpoint is refused before anything is built, pointing at the gemma route."""
    import shutil

    from adapters_lib.errors import WorkbenchError
    from adapters_lib.keras_route.model import model_dims
    from adapters_lib.models import families
    from adapters_lib.models.demo import ensure_demo_tokenizer
    from adapters_lib.models.hf import hf_convert

    arch, _, params = gemma3n_tiny
    hf_convert.save_hf(tmp_path, hf_convert.gemma_to_hf(params, arch=arch), families.hf_config_for(arch))
    shutil.copy(ensure_demo_tokenizer(), tmp_path / "tokenizer.model")
    with pytest.raises(WorkbenchError) as err:
        model_dims(keras_g4_config(tmp_path))
    text = str(err.value)
    assert "Gemma 3n only together with its vision and audio towers" in text and "\n" not in text
    assert 'backend = "gemma"' in text
