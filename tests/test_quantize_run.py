"""QLoRA on the demo: LoRA on an int4 base trains, checkpoints, resumes exactly, samples on the
quantized base with unmerged adapters, and exports by merging into the float base.

One int4 run of 6 steps straight and one stopped at 2 and resumed: two short trainings on
the demo (its programs come from the session's compile cache). Six steps take the eval loss
to 0.57-0.58 of the first batch's loss (seeds 0-2; the bar is 0.8)."""

from __future__ import annotations

import pytest
from fixtures_runs import StopAt, demo_overrides

from adapters_lib.runs import RunDir

STEPS = 6
STOP_AT = 2


def _config(root, name):
    from adapters_lib.config import load_config

    return load_config(None, demo_overrides(run__dir=f'"{root}"', run__name=f'"{name}"',
                                            model__quantize='"int4"', train__steps=STEPS,
                                            train__eval_every=3, train__checkpoint_every=3))


@pytest.fixture(scope="module")
def int4_runs(tmp_path_factory):
    """(straight run, result, resumed run): the same int4 config, once straight and once
    stopped at step 2 (between checkpoints) then resumed to the end."""
    from adapters_lib import runs
    from adapters_lib.train.loop import run_training

    root = tmp_path_factory.mktemp("qlora")
    cfg = _config(root, "straight")
    straight = runs.create_run(cfg)
    result = run_training(cfg, straight)
    cfg2 = _config(root, "resumed")
    resumed = runs.create_run(cfg2)
    stopped = run_training(cfg2, resumed, control=StopAt(STOP_AT))
    assert stopped.state == "stopped" and stopped.step == STOP_AT
    run_training(cfg2, resumed, resume=True)
    return straight, result, resumed


def test_lora_on_an_int4_base_lowers_eval_loss_and_checkpoints(int4_runs):
    straight, result, _ = int4_runs
    assert result.state == "completed" and straight.config().model.quantize == "int4"
    first = straight.metrics()[0]["loss"]  # the base model's loss on the first batch
    assert result.final_eval_loss is not None and result.final_eval_loss < 0.8 * first
    assert RunDir(straight.path).checkpoints() == [3, 6]


def test_an_int4_run_resumes_to_the_same_losses(int4_runs):
    straight, _, resumed = int4_runs
    a = {m["step"]: m["loss"] for m in RunDir(straight.path).metrics()}
    b = {m["step"]: m["loss"] for m in RunDir(resumed.path).metrics()}
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-6, abs=0), step


def test_the_tuned_side_is_the_quantized_base_with_unmerged_adapters(int4_runs):
    """sample/compare/eval load the run's base as its config says (int4), the adapters stay
    apart; ``quantize="none"`` (``--quantize none``) holds the same run's base as floats."""
    import jax
    import numpy as np
    import qwix

    from adapters_lib import tuned
    from adapters_lib.sample.settings import SamplingSettings

    straight, _, _ = int4_runs
    model = tuned.load_run_model(straight)
    assert model.loaded.quantize == "int4" and model.adapters is not None
    assert isinstance(model.loaded.params["layer_0"]["mlp"]["linear"], qwix.QArray)
    answers = model.generate({"base": ["1 + 1 ="], "tuned": ["1 + 1 ="]},
                             SamplingSettings(max_new_tokens=4), chat=True)
    assert answers["tuned"][0].tokens > 0 and answers["base"][0].tokens > 0
    floats = tuned.load_run_model(straight, quantize="none")
    assert floats.loaded.quantize == "none"
    assert not any(isinstance(x, qwix.QArray) for x in jax.tree.leaves(
        floats.loaded.params, is_leaf=lambda x: isinstance(x, qwix.QArray)))
    np.testing.assert_array_equal(np.asarray(jax.tree.leaves(model.adapters)[0]),
                                  np.asarray(jax.tree.leaves(floats.adapters)[0]))


def test_a_merged_export_of_an_int4_run_merges_into_the_float_base_in_bf16(int4_runs, tmp_path):
    """The gemma export of an int4 run is the float base + the adapters fused in f32, written
    in bfloat16: its logits are those of the float base with the unmerged adapters (to bf16
    rounding), not those of the int4 base. The adapter export is unchanged (float adapters)."""
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np
    from gemma import gm

    from adapters_lib import lora, tuned
    from adapters_lib.tuned import export_run

    straight, _, _ = int4_runs
    export_run(straight, "gemma", out=tmp_path / "merged")
    export_run(straight, "adapter", out=tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    merged = gm.ckpts.load_params(tmp_path / "merged")
    assert merged["layer_0"]["mlp"]["linear"].dtype == ml_dtypes.bfloat16
    floats = tuned.load_run_model(straight, quantize="none")
    quant = tuned.load_run_model(straight)
    tokens = jnp.asarray([[2, 50, 60, 70, 80, 90, 100, 110]])
    net = lora.wrap(floats.loaded.model, floats.lora)
    want = net.apply({"params": lora.merge_lora(floats.loaded.params, floats.adapters)}, tokens).logits
    got = floats.loaded.model.apply({"params": jax_f32(merged)}, tokens).logits
    int4 = lora.wrap(quant.loaded.model, quant.lora).apply(
        {"params": lora.merge_lora(quant.loaded.params, quant.adapters)}, tokens).logits
    err_merged = float(jnp.abs(got - want).max())
    err_int4 = float(jnp.abs(int4 - want).max())
    assert err_merged < 0.1 * err_int4, (err_merged, err_int4)
    assert np.isfinite(np.asarray(got)).all()


def jax_f32(tree):
    import jax
    import jax.numpy as jnp
    import numpy as np

    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float32)), tree)
