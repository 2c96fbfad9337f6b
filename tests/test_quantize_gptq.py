"""GPTQ for the quantized base (``[model] quantize_method = "gptq"``, ``models.quantize.quantize_gptq``):
equal to qwix's own GPTQ, closer to each projection's outputs than round-to-nearest, the same
layout, deterministic (a run's compare and resume load the base it trained on), and its
one-line refusals."""

from __future__ import annotations

import json

import pytest

from adapters_lib.config import ModelSpec, load_config
from adapters_lib.errors import WorkbenchError


@pytest.mark.parametrize("qtype, tile", [("int4", 32), ("int8", 64)])
def test_gptq_weight_equals_qwix_gptq_on_its_inputs(qtype, tile, monkeypatch):
    """``gptq_weight`` (fori loops XLA compiles) gives qwix's ``gptq_core.quantize_weight``'s
    integers and scales, Hessian of inputs of very unequal scales, two blocks, tiles inside
    them (64-column blocks: qwix's loop is a Python loop a column, eager and slow)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from qwix._src.core import qarray as qa
    from qwix.contrib import gptq_core

    from adapters_lib.models.gemma_layers import qtype as to_qtype
    from adapters_lib.models.quantize import quantize_gptq

    k = jax.random.split(jax.random.PRNGKey(0), 2)
    w = jax.random.normal(k[0], (12, 128))
    x = jax.random.normal(k[1], (128, 400)) * jnp.linspace(0.1, 3.0, 128)[:, None]
    h = x @ x.T
    how = qa.HowToQuantize(qtype=to_qtype(qtype), channelwise_axes=(0,), tiled_axes={1: tile})
    ref, _ = gptq_core.quantize_weight(w, h, how, blocksize=64)
    q, s = jax.jit(lambda w, h: quantize_gptq.gptq_weight(w, h, to_qtype(qtype), tile, block=64))(w, h)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(ref.qvalue))
    np.testing.assert_allclose(np.asarray(s), np.asarray(ref.scale), rtol=1e-6)
    rtn = qa.quantize(w, how)  # and it is not round-to-nearest
    assert not np.array_equal(np.asarray(q), np.asarray(rtn.qvalue))
    # a tall weight goes a block of rows at a time (GPTQ's rows are independent): the same
    monkeypatch.setattr(quantize_gptq, "ROWS", 5)
    monkeypatch.setattr(quantize_gptq, "ACT_ORDER", False)
    monkeypatch.setattr(quantize_gptq, "BLOCK", 64)
    held = quantize_gptq.quantize_weight(quantize_gptq.TABLE_EQN, w, h, qtype, tile, {1: tile})
    np.testing.assert_array_equal(np.asarray(held.qvalue), np.asarray(ref.qvalue))


def test_act_order_rounds_the_most_used_inputs_first_and_searched_scales_round_finer():
    """Act-order (AutoGPTQ's desc_act with static groups; the default): the tiles' scales are
    round-to-nearest's, and the layer's output error ‖X(W − Ŵ)‖² is below plain GPTQ's, itself
    below round-to-nearest's, on inputs of very unequal scales. With the scales searched (the
    default too) each is round-to-nearest's times a factor of the grid, some below 1, and the
    error lower still."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from qwix._src.core import qarray as qa

    from adapters_lib.models.gemma_layers import qtype
    from adapters_lib.models.quantize import quantize_gptq

    k = jax.random.split(jax.random.PRNGKey(1), 2)
    w = jax.random.normal(k[0], (64, 256))
    x = jax.random.normal(k[1], (256, 600)) * jax.random.uniform(k[1], (256, 1), minval=0.05, maxval=4.0)
    h = x @ x.T
    nf4 = qtype("nf4")
    rtn = qa.quantize(w, qa.HowToQuantize(qtype=nf4, channelwise_axes=(0,), tiled_axes={1: 64}))

    def error(q, s):
        dq = qa.dequantize(qa.QArray(qvalue=q, scale=jnp.repeat(s, 64, axis=1), zero_point=None, qtype=nf4))
        d = w - dq
        return float(jnp.trace(d @ h @ d.T))

    plain = jax.jit(lambda w, h: quantize_gptq.gptq_weight(w, h, nf4, 64))(w, h)
    ordered = jax.jit(lambda w, h: quantize_gptq.gptq_weight(w, h, nf4, 64, act_order=True))(w, h)
    np.testing.assert_allclose(np.asarray(ordered[1]), np.asarray(rtn.scale), rtol=1e-6)
    assert error(*ordered) < error(*plain) < error(rtn.qvalue, rtn.scale)
    clipped = jax.jit(lambda w, h: quantize_gptq.gptq_weight(w, h, nf4, 64, act_order=True, clip=True))(w, h)
    factor = np.asarray(clipped[1]) / np.asarray(rtn.scale)
    grid = np.asarray(quantize_gptq.CLIP_GRID)
    assert np.all(np.min(np.abs(factor[..., None] - grid), axis=-1) < 1e-5)
    assert 0.1 < np.mean(factor < 1) < 1.0  # a search: neither never nor always shrunk
    assert error(*clipped) < 0.97 * error(*ordered)


GPTQ_DEMO = ModelSpec(quantize="int4", quantize_method="gptq", quantize_calibration="demo")
"""The demo's GPTQ int4 base calibrated on the demo's data: what ``demo_bases`` loads, and the
base a demo run with ``quantize_method = "gptq"`` trains on and its Compare reads
(``gptq_run``), so those loads are the "every load" of the determinism test."""


@pytest.fixture(scope="module")
def demo_bases():
    """The demo base as float32, round-to-nearest int4 and GPTQ int4 (one calibration)."""
    from adapters_lib.models.loader import load_model

    return (load_model(ModelSpec()), load_model(ModelSpec(quantize="int4", quantize_calibration="demo")),
            load_model(GPTQ_DEMO))


@pytest.fixture(scope="module")
def gptq_run(tmp_path_factory):
    """A short QLoRA run on a GPTQ int4 base calibrated on its own data (the demo's), trained
    once for this module: (its config, its RunDir, its result, its Compare's tuned side)."""
    from fixtures_runs import demo_overrides

    from adapters_lib import runs, tuned
    from adapters_lib.train.loop import run_training

    cfg = load_config(None, demo_overrides(run__dir=f'"{tmp_path_factory.mktemp("gptq-run")}"',
                                           run__name='"gptq"', model__quantize='"int4"',
                                           model__quantize_method='"gptq"', train__steps=6,
                                           train__eval_every=6, train__checkpoint_every=6))
    run = runs.create_run(cfg)
    result = run_training(cfg, run)
    return cfg, run, result, tuned.load_run_model(run)


def test_a_gptq_base_keeps_each_projections_outputs_closer_than_round_to_nearest(demo_bases):
    """GPTQ's objective, measured: Σ ‖X(W − Ŵ)‖² over every projection on the calibration
    text (the table as the logits read it: X the final hidden states) is lower than
    round-to-nearest's, weight by weight on most and in total well below; the leaves have
    round-to-nearest's layout (types, shapes, dtypes, scales' shapes)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray, quantize_gptq

    f32, rtn, gptq = demo_bases
    hessians = quantize_gptq.hessians(f32, quantize_gptq.calibration_rows("demo", f32.tokenizer))
    errors = {"rtn": [], "gptq": []}
    for path, h in hessians.items():
        if path[-1] == "eqn":
            continue
        eqn = hessians[(*path, "eqn")]
        w = f32.params
        for name in path:
            w = w[name]
        for label, loaded in (("rtn", rtn), ("gptq", gptq)):
            q = loaded.params
            for name in path:
                q = q[name]
            d = quantize_gptq.as_matrix(eqn, w) - quantize_gptq.as_matrix(eqn, qarray.dequantize(q, jnp.float32))
            errors[label].append(float(jnp.trace(d @ h @ d.T)))
    assert len(errors["gptq"]) == 4 * 5 + 1  # q, kv, attn_vec, gating, linear in 4 layers; the table
    assert sum(errors["gptq"]) < 0.6 * sum(errors["rtn"])
    assert sum(g < r for g, r in zip(errors["gptq"], errors["rtn"], strict=True)) >= 19
    a = jax.tree.leaves(rtn.params, is_leaf=qarray.is_qarray)
    b = jax.tree.leaves(gptq.params, is_leaf=qarray.is_qarray)
    assert [type(x) for x in a] == [type(x) for x in b]
    for x, y in zip(a, b, strict=True):
        if qarray.is_qarray(x):
            assert (x.qvalue.shape, x.qvalue.dtype, x.scale.shape, x.scale.dtype) == \
                   (y.qvalue.shape, y.qvalue.dtype, y.scale.shape, y.scale.dtype)


def test_a_gptq_base_is_the_same_at_every_load(demo_bases, gptq_run):
    """Two loads of one spec hold the same integers and scales: a run's resume, eval and
    Compare read the base it trained on. The two loads: ``demo_bases``' and the one the
    Compare of a run on that spec made in its own calibration pass (the demo has no file
    for the weights cache to key, so each load calibrates)."""
    import jax
    import numpy as np

    cfg, _, _, side = gptq_run
    assert cfg.model_spec() == GPTQ_DEMO  # the run's base is this spec
    a, b = demo_bases[2], side.loaded
    assert a is not b
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_run_calibrates_on_its_own_data_unless_told(tmp_path):
    """``quantize_calibration = ""`` stays "" in the config (a form or file that changes
    ``[data] path`` moves it) and is the run's data where the run loads its base."""
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "Some text to tune on."}\n', encoding="utf-8")
    cfg = load_config(None, ["model.quantize=nf4", "model.quantize_method=gptq", f'data.path="{data}"'])
    assert cfg.model.quantize_calibration == "" and cfg.model_spec().quantize_calibration == str(data)
    text = tmp_path / "calib.txt"
    text.write_text("Some text to calibrate on.\n", encoding="utf-8")
    cfg = load_config(None, ["model.quantize=nf4", "model.quantize_method=gptq",
                             f'model.quantize_calibration="{text}"'])
    assert cfg.model_spec().quantize_calibration == str(text)
    assert load_config(None, ["model.quantize=nf4"]).model_spec().quantize_calibration == ""


@pytest.mark.parametrize("overrides, words", [
    (["model.quantize=nf4", "model.quantize_method=awq"], ("model.quantize_method", "gptq")),
    (["model.quantize_method=gptq"], ("quantize = 'none'", "int4")),
    (["model.quantize=gguf", "model.quantize_method=gptq"], ("quantize = 'gguf'", "rtn")),
    (["model.quantize=nf4", "model.quantize_calibration=demo"], ("quantize_calibration", "gptq")),
    (["model.backend=keras", "model.quantize=int8", "model.quantize_method=gptq"], ("gemma-only", "rtn")),
])
def test_gptq_settings_a_tired_user_gets_wrong_are_one_line(overrides, words):
    with pytest.raises(WorkbenchError) as e:
        load_config(None, overrides)
    text = str(e.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_calibration_text_too_short_or_missing_is_one_line(tmp_path):
    from adapters_lib.models.loader import load_model

    short = tmp_path / "short.txt"
    short.write_text("hi\n", encoding="utf-8")
    with pytest.raises(WorkbenchError) as e:
        load_model(ModelSpec(quantize="nf4", quantize_method="gptq", quantize_calibration=str(short)))
    text = str(e.value)
    assert "\n" not in text and "quantize_calibration" in text and "too little text" in text
    with pytest.raises(WorkbenchError) as e:
        load_model(ModelSpec(quantize="nf4", quantize_method="gptq",
                             quantize_calibration=str(tmp_path / "missing.jsonl")))
    assert "\n" not in str(e.value) and "missing.jsonl" in str(e.value), str(e.value)


def test_a_gptq_base_loads_sharded_over_4_devices_like_on_one(demo_bases):
    """Loaded on a (1, 2, 2) data×fsdp×tensor mesh (the Hessians from the sharded forward, GPTQ
    on the placed weights), each qvalue lies sharded like its weight and holds the one-device
    load's integers but for a few flipped by the sums' float order, and its scales but a few."""
    import jax
    import numpy as np

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import MeshSpec
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import qarray

    one = demo_bases[2]
    mesh = mesh_lib.make_mesh(MeshSpec(1, 2, 2, devices=4))
    four = load_model(ModelSpec(quantize="int4", quantize_method="gptq", quantize_calibration="demo"),
                      sharding=mesh_lib.sharding_fn(mesh))
    linear = four.params["layer_0"]["mlp"]["linear"]
    assert tuple(linear.qvalue.sharding.spec) == ("tensor", "fsdp")
    pairs = zip(jax.tree.leaves(one.params, is_leaf=qarray.is_qarray),
                jax.tree.leaves(four.params, is_leaf=qarray.is_qarray), strict=True)
    for a, b in pairs:
        if not qarray.is_qarray(a):
            continue
        same = np.mean(np.asarray(a.qvalue) == np.asarray(b.qvalue))
        assert same > 0.995, same
        close = np.isclose(np.asarray(a.scale, np.float32), np.asarray(b.scale, np.float32), rtol=1e-2)
        assert close.mean() > 0.97, close.mean()  # a flipped integer moves its block's later absmax


def test_a_second_load_reads_the_gptq_base_back_from_the_weights_cache(tmp_path, monkeypatch):
    """A GGUF base calibrated once: the second load (a resume, an eval, Compare in a new
    engine) reads the GPTQ integers and scales back from the converted-weights cache, with no
    calibration pass, and holds the same arrays; other calibration text is another entry."""
    import jax
    import numpy as np
    from fixtures_gguf import write_gguf
    from fixtures_weights import DEMO_ARCH, tiny_params

    from adapters_lib.models import demo
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import quantize_gptq

    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(tmp_path / "cache"))
    path = write_gguf(tmp_path / "gemma3-demo-f32.gguf", tiny_params(DEMO_ARCH, seed=3), DEMO_ARCH,
                      tokenizer=demo.ensure_demo_tokenizer())
    spec = ModelSpec(source=str(path), quantize="nf4", quantize_method="gptq", quantize_calibration="demo")
    first = load_model(spec)
    calls = []
    real = quantize_gptq.hessians
    monkeypatch.setattr(quantize_gptq, "hessians", lambda *a: calls.append(1) or real(*a))
    second = load_model(spec)
    assert calls == []
    for x, y in zip(jax.tree.leaves(first.params), jax.tree.leaves(second.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    text = tmp_path / "other.txt"
    text.write_text("\n\n".join(f"Paragraph {i}: the quick brown fox jumps over the lazy dog."
                                for i in range(200)), encoding="utf-8")
    load_model(ModelSpec(source=str(path), quantize="nf4", quantize_method="gptq",
                         quantize_calibration=str(text)))
    assert calls == [1]
    assert len([p for p in (tmp_path / "cache").iterdir() if "gptq" in p.name]) == 2


def test_a_gptq_run_trains_on_the_base_its_compare_reads(gptq_run):
    """A short QLoRA run on a GPTQ int4 base calibrated on its own data (the demo's): it
    completes and lowers the loss, and the tuned side of its Compare holds a GPTQ base (not
    round-to-nearest's: every load of one spec is the same, test above)."""
    import dataclasses

    import numpy as np

    from adapters_lib.models.loader import load_model

    cfg, run, result, compare = gptq_run
    assert result.state == "completed"
    assert result.final_eval_loss is not None and result.final_eval_loss < 0.9 * run.metrics()[0]["loss"]
    assert run.config().model.quantize_calibration == ""  # the run's data, where it loads
    side = compare.loaded.params["layer_0"]["mlp"]["linear"]
    rtn = load_model(dataclasses.replace(cfg.model_spec(), quantize_method="rtn", quantize_calibration=""))
    assert not np.array_equal(np.asarray(side.qvalue),
                              np.asarray(rtn.params["layer_0"]["mlp"]["linear"].qvalue))


def test_calibration_reads_a_dataset_only_where_its_rows_start(dataset_env, tmp_path, monkeypatch):
    """``hf:`` calibration text gives the rows the same records in a file give, reading the
    dataset a slice at a time where the rows start, not whole (a big cached dataset)."""
    from fixtures_datasets import imdb_like

    from adapters_lib.data.sources import source as source_mod
    from adapters_lib.models.demo import demo_tokenizer
    from adapters_lib.models.quantize import calibration_rows

    tok = demo_tokenizer()
    texts = [r["text"] for r in imdb_like().reviews(40, 0)]  # the cache's hf:imdb train split
    same = tmp_path / "same.jsonl"
    same.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    read: list[tuple[int, int]] = []
    real = source_mod.Source.read

    def counted(self, start, stop):
        read.append((start, stop))
        return real(self, start, stop)

    monkeypatch.setattr(source_mod.Source, "read", counted)
    rows = calibration_rows("hf:imdb", tok, rows=3, length=64)
    assert rows == calibration_rows(str(same), tok, rows=3, length=64)
    assert len(rows) == 3 and all(len(r) == 64 for r in rows)
    assert sum(min(b, 40) - a for a, b in read) < 40  # slices: never the whole split
