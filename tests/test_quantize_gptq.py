"""GPTQ for the quantized base (``[model] quantize_method = "gptq"``, ``models.quantize.quantize_gptq``):
equal to qwix's own GPTQ, closer to each projection's outputs than round-to-nearest, the same
layout, deterministic (a run's compare and resume load the base it trained on), and its
one-line refusals."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pytest

from adapters_lib.config import ModelSpec, load_config
from adapters_lib.errors import WorkbenchError


@pytest.mark.parametrize("qtype, tile", [("int4", 8), ("int8", 16)])
def test_gptq_weight_equals_qwix_gptq_on_its_inputs(qtype, tile, monkeypatch):
    """``gptq_weight`` (fori loops XLA compiles) gives qwix's ``gptq_core.quantize_weight``'s
    integers and scales, Hessian of inputs of very unequal scales, two blocks, tiles inside
    them (two tiles a block, or one). 16-column blocks of a 32-column weight: qwix's loop is a
    Python loop a column, eager, and compiles its ops anew for each column of a block (the
    slices shrink), so its cost grows with the block (64-column blocks: 21 s of CPU on 2
    cores, 16: ~5 s); the product's is ``BLOCK``, 128, the same code path."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from qwix._src.core import qarray as qa
    from qwix.contrib import gptq_core

    from adapters_lib.models.gemma_layers import qtype as to_qtype
    from adapters_lib.models.quantize import quantize_gptq

    k = jax.random.split(jax.random.PRNGKey(0), 2)
    w = jax.random.normal(k[0], (12, 32))
    x = jax.random.normal(k[1], (32, 400)) * jnp.linspace(0.1, 3.0, 32)[:, None]
    h = x @ x.T
    how = qa.HowToQuantize(qtype=to_qtype(qtype), channelwise_axes=(0,), tiled_axes={1: tile})
    ref, _ = gptq_core.quantize_weight(w, h, how, blocksize=16)
    q, s = jax.jit(lambda w, h: quantize_gptq.gptq_weight(w, h, to_qtype(qtype), tile, block=16))(w, h)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(ref.qvalue))
    np.testing.assert_allclose(np.asarray(s), np.asarray(ref.scale), rtol=1e-6)
    rtn = qa.quantize(w, how)  # and it is not round-to-nearest
    assert not np.array_equal(np.asarray(q), np.asarray(rtn.qvalue))
    # a tall weight goes a block of rows at a time (GPTQ's rows are independent): the same
    monkeypatch.setattr(quantize_gptq, "ROWS", 5)
    monkeypatch.setattr(quantize_gptq, "ACT_ORDER", False)
    monkeypatch.setattr(quantize_gptq, "BLOCK", 16)
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


def _demo_text(path, records: int = 8, per_record: int = 24):
    """The demo's train examples as ``records`` text records of ``per_record`` examples, a line
    each (~290 demo tokens a record): data that GPTQ calibrates on in ``records`` full rows
    (``CALIBRATION_LENGTH``: one program), where the demo's own data gives 64 (its forward and
    Hessians were ~4 s of CPU of each load of the demo's GPTQ base on 2 cores, 8 rows ~0.5 s)."""
    from adapters_lib.models.demo_tasks import demo_splits

    train, _ = demo_splits()
    lines = [f"{ex['messages'][0]['content']} {ex['messages'][1]['content']}" for ex in train]
    path.write_text("".join(json.dumps({"text": "\n".join(lines[i * per_record:(i + 1) * per_record])}) + "\n"
                            for i in range(records)), encoding="utf-8")
    return path


class Bases(NamedTuple):
    f32: Any
    rtn: Any
    gptq: Any
    """GPTQ nf4 calibrated on ``_demo_text``: ``gptq_run``'s training load, kept."""
    hessians: Any
    """The ``XᵀX`` that load's GPTQ rounded against (``quantize_gptq.hessians``' result, kept)."""


@pytest.fixture(scope="module")
def bases(gptq_run):
    """The tiny Gemma 2 GGUF as float32, round-to-nearest nf4 and GPTQ nf4 (tile 16), and the
    Hessians of the GPTQ load's calibration pass as the real function returns them: the GPTQ
    base and its Hessians are the ones ``gptq_run``'s training loaded (a GPTQ load of the
    demo's shapes of its own was ~12 s of CPU on 2 cores; the tiny model's f32 and RTN loads ~1 s)."""
    import dataclasses

    from adapters_lib.models import demo
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import quantize_gptq

    spec = gptq_run.cfg.model_spec()
    rows = quantize_gptq.calibration_rows(spec.quantize_calibration, demo.demo_tokenizer())
    assert [len(r) for r in rows] == [quantize_gptq.CALIBRATION_LENGTH] * 8  # full rows: one program
    [hessians] = gptq_run.passes
    return Bases(load_model(dataclasses.replace(spec, quantize="none", quantize_method="rtn")),
                 load_model(dataclasses.replace(spec, quantize_method="rtn")), gptq_run.trained_on, hessians)


def test_a_gptq_base_keeps_each_projections_outputs_closer_than_round_to_nearest(bases):
    """GPTQ's objective, measured: Σ ‖X(W − Ŵ)‖² over every projection on the calibration
    text (the table as the logits read it: X the final hidden states; ``H = XᵀX`` as the
    load's own calibration pass collected it) is lower than round-to-nearest's, weight by
    weight on most and in total well below; the leaves have round-to-nearest's layout (types,
    shapes, dtypes, scales' shapes). Measured on the tiny Gemma 2 (nf4, tile 16): 0.38 of
    round-to-nearest's in total, lower on 11 of 11 weights (each at most 0.44 of it); on the
    demo (int4, 4 layers) it was 0.30, lower on 21 of 21."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import qarray, quantize_gptq

    f32, rtn, gptq, hessians = bases
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
    assert len(errors["gptq"]) == 2 * 5 + 1  # q, kv, attn_vec, gating, linear in 2 layers; the table
    assert sum(errors["gptq"]) < 0.6 * sum(errors["rtn"])
    assert sum(g < r for g, r in zip(errors["gptq"], errors["rtn"], strict=True)) >= 10
    a = jax.tree.leaves(rtn.params, is_leaf=qarray.is_qarray)
    b = jax.tree.leaves(gptq.params, is_leaf=qarray.is_qarray)
    assert [type(x) for x in a] == [type(x) for x in b]
    for x, y in zip(a, b, strict=True):
        if qarray.is_qarray(x):
            assert (x.qvalue.shape, x.qvalue.dtype, x.scale.shape, x.scale.dtype) == \
                   (y.qvalue.shape, y.qvalue.dtype, y.scale.shape, y.scale.dtype)


class GptqRun(NamedTuple):
    cfg: Any
    run: Any
    result: Any
    compare: Any
    """Its Compare's tuned side (``tuned.load_run_model``: a load of its base of its own)."""
    trained_on: Any
    """The base its training loaded (``models.loader.load_model``'s result, kept)."""
    passes: list
    """The calibration passes (``quantize_gptq.hessians`` calls) of the training and the Compare."""


GPTQ_RUN_STEPS = 40


@pytest.fixture(scope="module")
def gptq_run(tmp_path_factory):
    """A short QLoRA run on the tiny Gemma 2 GGUF's GPTQ nf4 base calibrated on its own data
    (``_demo_text``), trained once for this module, with its Compare's tuned side; the
    converted-weights cache on (a folder of this module's), as for any model with files: the
    training's load calibrates and keeps the integers and scales, the Compare's reads them back.
    The base its training loaded is kept as ``load_model`` returns it; the calibration passes
    are counted. The tiny model learns slowly: ``GPTQ_RUN_STEPS`` at a constant 0.02 (its steps
    cost little; eval/first loss measured 0.79, 0.78, 0.79 on train.seed 0, 1, 2)."""
    from fixtures_runs import demo_overrides

    from adapters_lib import runs, tuned
    from adapters_lib.models import loader
    from adapters_lib.models.quantize import quantize_gptq
    from adapters_lib.train.loop import run_training

    root = tmp_path_factory.mktemp("gptq-run")
    data = _demo_text(root / "demo-text.jsonl")
    cfg = load_config(None, demo_overrides(
        run__dir=f'"{root}"', run__name='"gptq"', data__path=f'"{data}"', data__eval_fraction=0.25,
        model__source=f'"{_tiny_gguf(root)}"', model__quantize='"nf4"', model__quantize_method='"gptq"',
        model__quantize_tile_size=16, train__steps=GPTQ_RUN_STEPS, train__warmup_steps=2,
        train__learning_rate=0.02, train__eval_every=GPTQ_RUN_STEPS, train__checkpoint_every=GPTQ_RUN_STEPS))
    run = runs.create_run(cfg)
    loads, passes = [], []
    real_load, real_hessians = loader.load_model, quantize_gptq.hessians
    with pytest.MonkeyPatch.context() as mp:  # the real functions; what they return is kept
        mp.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(root / "converted"))
        mp.setattr(loader, "load_model", lambda *a, **k: loads.append(real_load(*a, **k)) or loads[-1])
        mp.setattr(quantize_gptq, "hessians", lambda *a: passes.append(real_hessians(*a)) or passes[-1])
        result = run_training(cfg, run)
        [trained_on] = loads
        compare = tuned.load_run_model(run)
    return GptqRun(cfg, run, result, compare, trained_on, passes)


def test_a_gptq_base_is_the_same_at_every_load(gptq_run, monkeypatch):
    """Two loads of one spec hold the same integers and scales: a run's resume, eval and
    Compare read the base it trained on. Here the run's training load (calibrated, kept in the
    weights cache), its Compare's (read back from the cache: no calibration pass) and a load on
    the run's mesh, as a resume makes it, with the cache off: it calibrates again on its own."""
    import jax
    import numpy as np

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.models.loader import load_model

    spec = gptq_run.cfg.model_spec()
    assert (spec.quantize, spec.quantize_method, spec.quantize_calibration) == \
        ("nf4", "gptq", gptq_run.cfg.data.path)  # the run's base: GPTQ on its own data
    assert len(gptq_run.passes) == 1  # the training's; the Compare read the cache
    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", "")
    again = load_model(spec, sharding=mesh_lib.sharding_fn(mesh_lib.make_mesh(gptq_run.cfg.mesh)))
    a, b = gptq_run.trained_on, gptq_run.compare.loaded
    assert a is not b
    for x, y, z in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), jax.tree.leaves(again.params),
                       strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        np.testing.assert_array_equal(np.asarray(x), np.asarray(z))


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


def _tiny_gguf(folder):
    """A tiny Gemma 2 (2 layers, D 64, heads 16 wide: ``quantize_tile_size = 16``) as an f32
    GGUF with the demo tokenizer: GPTQ of the demo's shapes takes ~12 s of CPU a load on 2
    cores (nf4; 4 simulated devices: ~35 s), of this one ~1 s."""
    from fixtures_gguf import write_gguf
    from fixtures_weights import TINY_GEMMA2, tiny_params

    from adapters_lib.models import demo

    return write_gguf(folder / "gemma2-tiny-f32.gguf", tiny_params(TINY_GEMMA2, seed=3), TINY_GEMMA2,
                      tokenizer=demo.ensure_demo_tokenizer())


def _calibration_text(path, words: str):
    """8 paragraphs of ~320 demo tokens: 8 calibration rows, each full (``CALIBRATION_LENGTH``),
    so the calibration's forward is the one program (a short row would be another)."""
    path.write_text("\n\n".join(" ".join(f"Paragraph {i}, line {j}: {words}." for j in range(10))
                                  for i in range(8)), encoding="utf-8")
    return path


def test_a_gptq_base_loads_sharded_over_4_devices_like_on_one(gptq_run, monkeypatch):
    """Loaded on a (1, 2, 2) data×fsdp×tensor mesh (the Hessians from the sharded forward, GPTQ
    on the placed weights), each qvalue lies sharded like its weight and holds the one-device
    load's integers but for a few flipped by the sums' float order, and its scales but a few.
    The one-device load is ``gptq_run``'s training load (the tiny Gemma 2 GGUF, nf4, calibrated
    on ``_demo_text``); the sharded one calibrates again, the converted-weights cache off
    (measured: no integer flipped and every scale the same on this text; on other text at most
    0.15 % of a leaf's integers flipped)."""
    import jax
    import numpy as np

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import MeshSpec
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import qarray

    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", "")
    spec, one = gptq_run.cfg.model_spec(), gptq_run.trained_on
    assert (spec.quantize, spec.quantize_method, spec.quantize_tile_size) == ("nf4", "gptq", 16)
    mesh = mesh_lib.make_mesh(MeshSpec(1, 2, 2, devices=4))
    four = load_model(spec, sharding=mesh_lib.sharding_fn(mesh))
    linear = four.params["layer_0"]["mlp"]["linear"]
    assert tuple(linear.qvalue.sharding.spec) == ("tensor", "fsdp")
    pairs = zip(jax.tree.leaves(one.params, is_leaf=qarray.is_qarray),
                jax.tree.leaves(four.params, is_leaf=qarray.is_qarray), strict=True)
    held = 0
    for a, b in pairs:
        if not qarray.is_qarray(a):
            continue
        held += 1
        same = np.mean(np.asarray(a.qvalue) == np.asarray(b.qvalue))
        assert same > 0.995, same
        close = np.isclose(np.asarray(a.scale, np.float32), np.asarray(b.scale, np.float32), rtol=1e-2)
        assert close.mean() > 0.97, close.mean()  # a flipped integer moves its block's later absmax
    assert held == 5 * 2 + 1


def test_a_second_load_reads_the_gptq_base_back_from_the_weights_cache(tmp_path, monkeypatch):
    """A GGUF base calibrated once: the second load (a resume, an eval, Compare in a new
    engine) reads the GPTQ integers and scales back from the converted-weights cache, with no
    calibration pass, and holds the same arrays; other calibration text is another entry.
    The cache's keys and contents are what is checked here: the tiny Gemma 2 GGUF and short
    texts (8 rows); GPTQ's numbers are checked on the demo above."""
    import jax
    import numpy as np

    from adapters_lib.models import demo
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import quantize_gptq

    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(tmp_path / "cache"))
    path = _tiny_gguf(tmp_path)
    text = _calibration_text(tmp_path / "calibration.txt", "the quick brown fox jumps over the lazy dog")
    assert len(quantize_gptq.calibration_rows(str(text), demo.demo_tokenizer())) == 8
    spec = ModelSpec(source=str(path), quantize="nf4", quantize_method="gptq", quantize_calibration=str(text),
                     quantize_tile_size=16)  # its heads are 16 wide
    first = load_model(spec)
    calls = []
    real = quantize_gptq.hessians
    monkeypatch.setattr(quantize_gptq, "hessians", lambda *a: calls.append(1) or real(*a))
    second = load_model(spec)
    assert calls == []
    for x, y in zip(jax.tree.leaves(first.params), jax.tree.leaves(second.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = _calibration_text(tmp_path / "other.txt", "a slow green turtle walks under the busy bridge")
    load_model(ModelSpec(source=str(path), quantize="nf4", quantize_method="gptq",
                         quantize_calibration=str(other), quantize_tile_size=16))
    assert calls == [1]
    entries = [p for p in (tmp_path / "cache").iterdir() if "gptq" in p.name]
    assert len(entries) == 2
    for entry in entries:  # a qvalue and its scales for every projection (5 a layer) and the table
        manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
        assert len(manifest["leaves"]) == 2 * (5 * 2 + 1)


def test_a_gptq_run_trains_on_the_base_its_compare_reads(gptq_run):
    """A short QLoRA run on a GPTQ base calibrated on its own data (``gptq_run``: the tiny
    Gemma 2 GGUF's nf4): it completes and lowers the loss, and the tuned side of its Compare
    holds a GPTQ base (not round-to-nearest's: every load of one spec is the same, test above)."""
    import dataclasses

    import numpy as np

    from adapters_lib.models.loader import load_model

    cfg, run, result, compare = gptq_run[:4]
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
