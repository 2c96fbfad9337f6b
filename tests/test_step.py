"""The train/eval steps on one device: loss, masks, chunked CE, grad accumulation, remat, donation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from adapters_lib import lora, mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.train import loss as loss_lib
from adapters_lib.train import step as step_lib

L = 32
ONE = MeshSpec(data=1, fsdp=1, tensor=1, devices=1)


def _cfg(**train) -> RunConfig:
    return RunConfig(mesh=ONE, data=DataSpec(max_length=L), lora=LoraSpec(rank=4),
                     train=TrainSpec(batch_size=8, **train))


def _tree_close(a, b, rtol, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def one_mesh():
    return mesh.make_mesh(ONE)


SGD = optax.sgd(0.5)
"""The plain optimizer of the tests below (an update is half the gradient). One learning rate and
one cross-entropy chunk (``CE_CHUNK``) everywhere, so that the programs of one shape are one
program (``sgd_steps`` keeps them; JAX's compile cache serves the others)."""
CE_CHUNK = 8


@pytest.fixture(scope="module")
def sgd_steps(demo, one_mesh, lora_params):
    """``sgd_steps(kind, gather=True)``: the steps of ``kind`` ("lora f32", "lora bf16", "full
    f32") with ``SGD``, built once in this module: the tests that only run them share their
    compiled programs (a step compiles once per batch shape and loss slots)."""
    model, base = demo
    made = {}

    def make(kind: str = "lora f32", gather: bool = True):
        if (kind, gather) not in made:
            cfg = _cfg(compute_dtype="bfloat16" if "bf16" in kind else "float32")
            if kind.startswith("full"):
                cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, enabled=False))
            trainable = base if kind.startswith("full") else lora_params(cfg.lora)
            made[kind, gather] = step_lib.build_steps(model, cfg, SGD, one_mesh, base, trainable,
                                                      ce_chunk=CE_CHUNK, gather_loss=gather)
        return made[kind, gather]

    return make


@pytest.fixture(scope="module")
def lora_steps(sgd_steps):
    return sgd_steps("lora f32")


def test_attention_mask_is_causal_within_one_packed_example():
    seg = jnp.array([[1, 1, 2, 2, 0]])
    got = np.asarray(loss_lib.attention_mask(seg))[0]
    expected = np.array([
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0],
    ], bool)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("softcap", "split_vocab"), [(None, 1), (5.0, 4)])
def test_chunked_cross_entropy_equals_full_cross_entropy(softcap, split_vocab):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(k1, (2, 32, 16))
    table = jax.random.normal(k2, (64, 16))
    targets = jax.random.randint(k3, (2, 32), 0, 64)
    mask = (jnp.arange(32) % 3 != 0).astype(jnp.float32)[None].repeat(2, 0)

    def full(h, t):
        logits = h @ t.T
        if softcap:
            logits = jnp.tanh(logits / softcap) * softcap
        return loss_lib.full_ce_sum(logits, targets, mask)

    def chunked(h, t):
        return loss_lib.chunked_ce_sum(h, t, targets, mask, chunk=8, softcap=softcap, split_vocab=split_vocab)

    v_full, g_full = jax.jit(jax.value_and_grad(full, argnums=(0, 1)))(hidden, table)
    v_chunk, g_chunk = jax.jit(jax.value_and_grad(chunked, argnums=(0, 1)))(hidden, table)
    np.testing.assert_allclose(v_chunk, v_full, rtol=1e-6)
    _tree_close(g_chunk, g_full, rtol=1e-5, atol=1e-6)


def _dot_input_dtypes(jaxpr) -> set[tuple[str, ...]]:
    found = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.add(tuple(str(v.aval.dtype) for v in eqn.invars))
        for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else ():
            found |= _dot_input_dtypes(sub)
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", p)
            if hasattr(inner, "eqns"):
                found |= _dot_input_dtypes(inner)
    return found


def test_bf16_cross_entropy_backward_multiplies_in_bf16():
    # an f32 cotangent times the bf16 table would run as an f32 matmul over the vocabulary
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    hidden = jax.random.normal(k1, (2, 32, 16), jnp.float32)
    table = jax.random.normal(k2, (64, 16), jnp.float32)
    targets = jax.random.randint(k3, (2, 32), 0, 64)
    mask = jnp.ones((2, 32), jnp.float32)

    def loss(h, t):
        return loss_lib.chunked_ce_sum(h, t, targets, mask, chunk=8)

    grad = jax.grad(loss, argnums=(0, 1))
    lo = grad(hidden.astype(jnp.bfloat16), table.astype(jnp.bfloat16))
    hi = grad(hidden, table)
    assert lo[0].dtype == jnp.bfloat16 and lo[1].dtype == jnp.bfloat16
    for a, b in zip(lo, hi, strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b), rtol=5e-2, atol=5e-2)
    dots = _dot_input_dtypes(jax.make_jaxpr(grad)(hidden.astype(jnp.bfloat16), table.astype(jnp.bfloat16)).jaxpr)
    assert dots and all(set(d) == {"bfloat16"} for d in dots), dots


def test_lora_at_step_zero_scores_like_the_base_model(demo, lora_steps, make_batch):
    model, base = demo
    fresh = lora.init_lora(model, _cfg().lora, base, jax.random.key(3))
    batch = make_batch(8, L, seed=1, packed=True)  # the shapes of lora_steps' other evals: one program
    out = lora_steps.eval_step(lora_steps.init_state(fresh).params, batch)

    @jax.jit  # gemma's own forward as one program (run op by op, each op compiled on its own)
    def base_ce(params, batch):
        mask = loss_lib.attention_mask(batch["segment_ids"])
        logits = model.apply({"params": params}, batch["tokens"], positions=batch["positions"],
                             attention_mask=mask).logits
        return loss_lib.full_ce_sum(logits, batch["targets"], batch["loss_mask"])

    ref = base_ce(base, batch)
    np.testing.assert_allclose(out["loss_sum"], ref, rtol=1e-5)
    assert float(out["n_tokens"]) == batch["loss_mask"].sum()


def test_packed_examples_score_as_if_each_had_its_own_row(sgd_steps, make_batch):
    """Scored by the full computation (every position: ``gather=False``), in rows of the batch
    shape of the module's other steps (8 × L; empty rows score nothing): the program the
    gathering test's full side runs, compiled once for both."""
    steps = sgd_steps("lora f32", gather=False)
    a = make_batch(1, 12, seed=5)
    b = make_batch(1, 14, seed=6)

    def row(parts):
        out = {k: np.zeros((1, L), v.dtype) for k, v in a.items()}
        at = 0
        for i, p in enumerate(parts):
            n = p["tokens"].shape[1]
            for k in out:
                out[k][0, at:at + n] = p[k][0]
            out["segment_ids"][0, at:at + n] = i + 1
            at += n
        return out

    empty = {k: np.zeros((6, L), v.dtype) for k, v in a.items()}
    packed = {k: np.concatenate([v, np.zeros_like(v), empty[k]]) for k, v in row([a, b]).items()}
    separate = {k: np.concatenate([row([a])[k], row([b])[k], empty[k]]) for k in a}
    trainable = _fresh(steps)
    got_packed = steps.eval_step(trainable, packed)
    got_separate = steps.eval_step(trainable, separate)
    assert float(got_packed["n_tokens"]) == float(got_separate["n_tokens"]) == 24
    np.testing.assert_allclose(got_packed["loss_sum"], got_separate["loss_sum"], rtol=1e-5)


def _fresh(steps):
    """A copy of the steps' abstract trainable tree filled with small deterministic values."""
    leaves, tree = jax.tree.flatten(steps.abstract_state.params)
    keys = jax.random.split(jax.random.key(11), len(leaves))
    return jax.tree.unflatten(tree, [0.02 * jax.random.normal(k, x.shape, x.dtype)
                                     for x, k in zip(leaves, keys, strict=True)])


def test_grad_accumulation_two_by_four_equals_one_batch_of_eight(demo, one_mesh, lora_params, lora_steps,
                                                                 make_batch):
    model, base = demo
    trainable = lora_params(LoraSpec(rank=4))
    batch = make_batch(8, L, seed=2, packed=True)
    results = []
    accum2 = step_lib.build_steps(model, _cfg(grad_accum=2), SGD, one_mesh, base, trainable, ce_chunk=CE_CHUNK)
    for steps in (lora_steps, accum2):  # one batch of 8, then two micro-batches of 4
        state, metrics = steps.train_step(steps.init_state(trainable), batch)
        results.append((jax.device_get(metrics), jax.device_get(state.params), steps))
    (m1, p1, _), (m2, p2, steps2) = results
    np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-6)
    np.testing.assert_allclose(m2["grad_norm"], m1["grad_norm"], rtol=1e-5)
    assert m1["n_tokens"] == m2["n_tokens"] == batch["loss_mask"].sum()
    _tree_close(p2, p1, rtol=1e-5, atol=1e-6)
    # chunked CE: no [micro-batch, L, V] logits buffer anywhere in the compiled step
    hlo = steps2.lower_train({k: jax.ShapeDtypeStruct((8, L), v.dtype) for k, v in batch.items()},
                             L).compile().as_text()
    ce_shapes = {line.split("=")[1].split("{")[0].strip() for line in hlo.splitlines()
                 if "ce_chunk" in line and "1024]" in line.split("=")[1].split("metadata")[0]}
    assert "f32[4,8,1024]" in ce_shapes and not any(f",{L},1024]" in s for s in ce_shapes)


def test_learning_rate_and_run_length_are_inputs_of_one_compiled_step(demo, one_mesh, lora_params, make_batch):
    """Runs differing only in learning rate, length and warm-up (sweep points) share one program,
    and each still applies its own learning rate."""
    from adapters_lib.train.optimizer import make_optimizer, make_schedule

    model, base = demo
    trainable = lora_params(LoraSpec(rank=4))
    batch = make_batch(8, L, seed=4)
    specs = [dict(learning_rate=1e-3, steps=100, warmup_steps=10, schedule="cosine"),
             dict(learning_rate=4e-3, steps=37, warmup_steps=3, schedule="cosine")]
    programs, moved = [], []
    for spec in specs:
        cfg = _cfg(**spec)
        steps = step_lib.build_steps(model, cfg, make_optimizer(cfg.train), one_mesh, base, trainable)
        abstract = {k: jax.ShapeDtypeStruct((8, L), v.dtype) for k, v in batch.items()}
        programs.append(steps.lower_train(abstract, L).as_text())
        state, _ = steps.train_step(steps.init_state(trainable), batch)
        delta = [np.abs(np.asarray(a) - np.asarray(b)).max()
                 for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(trainable), strict=True)]
        moved.append((max(delta), float(make_schedule(cfg.train)(0))))
    assert programs[0] == programs[1]  # the same program: the compile cache serves both
    # Adam's first step moves each param by about the learning rate at step 0: each its own
    (move_a, lr_a), (move_b, lr_b) = moved
    assert lr_b / lr_a == pytest.approx((4e-3 / 4) / (1e-3 / 11))
    assert move_b / move_a == pytest.approx(lr_b / lr_a, rel=0.05)


def test_full_finetune_with_remat_matches_without(demo, one_mesh, sgd_steps, make_batch):
    """Both by the full computation (``gather=False``): the step without remat is the one the
    gathering test's full side runs (the same shapes), compiled once for both."""
    model, base = demo
    batch = make_batch(8, L, seed=4)
    cfg = _cfg(remat=True)
    cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, enabled=False))
    remat = step_lib.build_steps(model, cfg, SGD, one_mesh, base, base, ce_chunk=CE_CHUNK, gather_loss=False)
    out = []
    for steps in (sgd_steps("full f32", gather=False), remat):
        assert jax.tree.leaves(steps.base_params) == []  # full FT: nothing frozen
        state, metrics = steps.train_step(steps.init_state(base), batch)
        out.append((jax.device_get(metrics), jax.device_get(state.params)))
    np.testing.assert_allclose(out[1][0]["loss"], out[0][0]["loss"], rtol=1e-6)
    np.testing.assert_allclose(out[1][0]["grad_norm"], out[0][0]["grad_norm"], rtol=1e-4)
    _tree_close(out[1][1], out[0][1], rtol=1e-4, atol=1e-6)
    changed = jax.tree.map(lambda a, b: bool(np.any(a != b)), out[0][1], jax.device_get(base))
    assert all(jax.tree.leaves(changed))  # every param trains


def test_bf16_compute_tracks_f32(lora_params, sgd_steps, make_batch):
    """By the full computation (``gather=False``): the programs the gathering test's full side
    runs (the same shapes), compiled once for both."""
    trainable = lora_params(LoraSpec(rank=4))
    steps, f32 = sgd_steps("lora bf16", gather=False), sgd_steps("lora f32", gather=False)
    batch = make_batch(8, L, seed=7)
    lo = steps.eval_step(steps.init_state(trainable).params, batch)
    hi = f32.eval_step(f32.init_state(trainable).params, batch)
    np.testing.assert_allclose(lo["loss_sum"], hi["loss_sum"], rtol=2e-2)
    state = steps.init_state(trainable)
    state, _ = steps.train_step(state, batch)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))


def test_train_step_donates_the_state_and_returns_device_scalars(lora_steps, lora_params, make_batch):
    trainable = lora_params(LoraSpec(rank=4))
    state = lora_steps.init_state(trainable)
    base_leaf = jax.tree.leaves(lora_steps.base_params)[0]
    new, metrics = lora_steps.train_step(state, make_batch(8, L, seed=8))
    assert all(x.is_deleted() for x in jax.tree.leaves(state.params))
    assert not base_leaf.is_deleted()
    assert int(new.step) == 1
    assert set(metrics) == {"loss", "grad_norm", "n_tokens"}
    assert all(isinstance(v, jax.Array) and v.shape == () for v in metrics.values())
    new2, m2 = lora_steps.train_step(new, make_batch(8, L, seed=8))
    assert float(m2["loss"]) < float(metrics["loss"])  # SGD on the same batch descends


# --------------------------------------------------------------------------- logits only where the loss is


def _answer_only(batch: dict, prompt_share: float = 0.6) -> dict:
    """``batch`` with the loss on the last part of each packed example only (a chat answer)."""
    out = {k: v.copy() for k, v in batch.items()}
    for r in range(out["segment_ids"].shape[0]):
        for s in np.unique(out["segment_ids"][r]):
            if s == 0:
                continue
            idx = np.where(out["segment_ids"][r] == s)[0]
            out["loss_mask"][r, idx[: int(len(idx) * prompt_share)]] = 0
    return out


def test_loss_slots_round_the_busiest_row_up_to_an_eighth_of_the_length():
    mask = np.zeros((3, 64), np.float32)
    mask[0, 10:20] = 1  # 10
    mask[1, 5:30] = 1  # 25: the busiest row → 32
    assert loss_lib.loss_slots(mask) == 32
    assert loss_lib.loss_slots(np.zeros((2, 64))) == 8  # at least one granule
    assert loss_lib.loss_slots(np.ones((2, 64))) == 64
    mask[2, :57] = 1  # 57 > 7/8 · 64: every position
    assert loss_lib.loss_slots(mask) == 64
    assert loss_lib.loss_slots(np.ones((1, 30))[:, :27]) == 27  # granule 4, capped at L


def test_gathered_positions_give_the_full_loss_and_gradients():
    k1, k2, k3 = jax.random.split(jax.random.key(2), 3)
    hidden = jax.random.normal(k1, (3, 32, 16))
    table = jax.random.normal(k2, (64, 16))
    targets = jax.random.randint(k3, (3, 32), 0, 64)
    mask = np.zeros((3, 32), np.float32)
    mask[0, 3:9] = 1
    mask[1, 20:31] = 0.5  # weights other than 1 are kept
    mask[1, 1] = 1
    slots = loss_lib.loss_slots(mask)
    assert slots == 12
    mask = jnp.asarray(mask)

    def full(h, t):
        return loss_lib.chunked_ce_sum(h, t, targets, mask, chunk=8, softcap=3.0)

    def gathered(h, t):
        hg, tg, mg = loss_lib.gather_loss_positions(h, targets, mask, slots)
        return loss_lib.chunked_ce_sum(hg, t, tg, mg, chunk=4, softcap=3.0)

    v_full, g_full = jax.jit(jax.value_and_grad(full, argnums=(0, 1)))(hidden, table)
    v_gath, g_gath = jax.jit(jax.value_and_grad(gathered, argnums=(0, 1)))(hidden, table)
    np.testing.assert_allclose(v_gath, v_full, rtol=1e-6)
    _tree_close(g_gath, g_full, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(g_gath[0][2]).max()) == 0.0  # a row with no loss gets no gradient


@pytest.mark.parametrize("kind", ["lora f32", "lora bf16", "full f32"])
def test_train_and_eval_steps_gathering_loss_positions_equal_the_full_computation(
        kind, demo, lora_params, sgd_steps, make_batch):
    _, base = demo
    trainable = base if kind.startswith("full") else lora_params(LoraSpec(rank=4))
    batch = _answer_only(make_batch(8, L, seed=12, packed=True))
    out = {}
    for gather in (False, True):
        steps = sgd_steps(kind, gather)
        placed = steps.put_batch(batch)
        assert placed.slots == (loss_lib.loss_slots(batch["loss_mask"]) if gather else L)
        ev = jax.device_get(steps.eval_step(steps.init_state(trainable).params, placed))
        state, metrics = steps.train_step(steps.init_state(trainable), placed)
        update = jax.tree.map(lambda a, b: np.asarray(a, np.float32) - np.asarray(b, np.float32),
                              jax.device_get(state.params), jax.device_get(trainable))
        out[gather] = ev, jax.device_get(metrics), update
    assert loss_lib.loss_slots(batch["loss_mask"]) < L  # the gathered path did run
    (ev0, m0, u0), (ev1, m1, u1) = out[False], out[True]
    rtol = 2e-2 if "bf16" in kind else 1e-5
    np.testing.assert_allclose(ev1["loss_sum"], ev0["loss_sum"], rtol=rtol)
    np.testing.assert_allclose(m1["loss"], m0["loss"], rtol=rtol)
    np.testing.assert_allclose(m1["grad_norm"], m0["grad_norm"], rtol=5 * rtol)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(u1)[0], jax.tree.leaves(u0), strict=True):
        scale = float(np.abs(b).max()) or 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=(5e-2 if "bf16" in kind else 1e-5) * scale,
                                   err_msg=jax.tree_util.keystr(path))


def test_compile_behind_runs_a_batch_in_a_wider_program_while_its_own_compiles(demo, one_mesh, lora_params,
                                                                               make_batch):
    """On an accelerator (``compile_behind``; forced here, off on a CPU by default): a batch
    whose own program is not compiled yet runs in a compiled one with more loss positions —
    the same loss and gradients — while its own compiles in the background, and the next such
    batch runs in its own; the eval step's program compiles before the first eval."""
    import concurrent.futures

    from adapters_lib.train import step_programs

    model, base = demo
    cfg = _cfg()
    trainable = lora_params(cfg.lora)
    step_programs.forget()
    try:
        assert not step_lib.build_steps(model, cfg, SGD, one_mesh, base, trainable,
                                        ce_chunk=CE_CHUNK).compile_behind  # the CPU's default
        steps = step_lib.build_steps(model, cfg, SGD, one_mesh, base, trainable, ce_chunk=CE_CHUNK,
                                     compile_behind=True)
        every = steps.put_batch(make_batch(8, L, seed=3, packed=True))
        few = steps.put_batch(_answer_only(make_batch(8, L, seed=12, packed=True)))
        assert few.slots < every.slots
        (pending,) = steps.compile_eval_behind([few])
        pending.result(timeout=300)
        eval_sig = steps._eval.signature({k: few[k] for k in steps.keys}, few.slots)
        assert eval_sig in steps._eval.compiled  # compiled before any eval ran
        assert steps.compile_eval_behind([few]) == []  # ready: nothing to start
        ev = jax.device_get(steps.eval_step(trainable, few))
        ev_jit = jax.device_get(steps._eval.jitted(trainable, steps.base_params, steps.reference_params,
                                                   {k: few[k] for k in steps.keys}, steps.lora_runtime, few.slots))
        np.testing.assert_allclose(ev["loss_sum"], ev_jit["loss_sum"], rtol=1e-6)

        steps.train_step(steps.init_state(trainable), every)  # the wider program, compiled now
        _, wide = steps.train_step(steps.init_state(trainable), few)
        shape = ("train", (8, L))
        assert (*shape, few.slots) not in steps._compiled and (*shape, every.slots) in steps._compiled  # ran wide
        concurrent.futures.wait(list(steps._train.pending.values()), timeout=300)
        train_sig = steps._train.signature({k: few[k] for k in steps.keys}, few.slots)
        assert train_sig in steps._train.compiled  # its own, compiled behind
        _, own = steps.train_step(steps.init_state(trainable), few)
        assert (*shape, few.slots) in steps._compiled  # ran in its own
        for program, sig in ((steps._train, train_sig), (steps._eval, eval_sig)):  # took the arguments
            assert program.compiled[sig] is not program.jitted
        wide, own = jax.device_get((wide, own))
        np.testing.assert_allclose(wide["loss"], own["loss"], rtol=1e-5)
        np.testing.assert_allclose(wide["grad_norm"], own["grad_norm"], rtol=1e-4)
    finally:
        step_programs.forget()


def test_compile_behind_reads_and_fills_the_program_store_like_a_call(demo, one_mesh, lora_params, make_batch,
                                                                      tmp_path):
    """With the engine's program store on, a program compiled behind is stored under the step's
    key like one a call compiles, and the call that needs it then compiles nothing."""
    from adapters_lib import program_store
    from adapters_lib.train import step_programs
    from adapters_lib.train.optimizer import make_optimizer

    model, base = demo
    cfg = _cfg()
    trainable = lora_params(cfg.lora)
    step_programs.forget()
    program_store.enable(tmp_path)
    try:
        steps = step_lib.build_steps(model, cfg, make_optimizer(cfg.train), one_mesh, base, trainable,
                                     ce_chunk=8, compile_behind=True)
        assert steps._eval.key is not None  # our optimizer: the programs have a key
        few = steps.put_batch(_answer_only(make_batch(8, L, seed=12, packed=True)))
        before = dict(program_store.stats)
        (pending,) = steps.compile_eval_behind([few])
        pending.result(timeout=300)
        assert program_store.stats["compiled"] == before["compiled"] + 1
        assert program_store.stats["stored"] == before["stored"] + 1
        assert [p.suffix for p in tmp_path.rglob("*" + program_store.SUFFIX)]
        ev = steps.eval_step(trainable, few)
        assert program_store.stats["compiled"] == before["compiled"] + 1  # nothing compiled again
        assert np.isfinite(float(ev["loss_sum"])) and float(ev["weight"]) > 0
    finally:
        program_store.disable()
        step_programs.forget()


def test_a_process_exits_without_waiting_for_a_compile_behind():
    """The background compile thread is a daemon: an engine that stops does not wait minutes
    for a program nobody needs any more."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    code = ("import time\nfrom adapters_lib.train import step_programs\n"
            "f = step_programs._behind().submit(time.sleep, 60)\n"
            "while not f.running():\n    time.sleep(0.01)\nprint('running')\n")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and out.stdout.strip() == "running", out.stderr[-1000:]
    assert time.perf_counter() - t < 30
