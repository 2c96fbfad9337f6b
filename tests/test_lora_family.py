"""One program for a family of LoRA configs (``lora.family``): a rank inside the bucket, any alpha,
any targets train exactly as their own program does, compile nothing new, and checkpoints hold
the run's own rank."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from adapters_lib import lora, mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.lora import family as lora_family
from adapters_lib.train import step as step_lib
from adapters_lib.train.optimizer import make_optimizer

L = 32
ONE = MeshSpec(data=1, fsdp=1, tensor=1, devices=1)
SEEDS = (1, 2, 4, 5)
"""Packed batches (``make_batch(4, L, seed, packed=True)``) whose busiest row has the same loss
positions (28 of 32: ``loss.loss_slots``), so that each step compiles once, not once per slot count."""


def _cfg(spec: LoraSpec) -> RunConfig:
    return RunConfig(mesh=ONE, data=DataSpec(max_length=L), lora=spec,
                     train=TrainSpec(batch_size=4, learning_rate=3e-2, warmup_steps=0, weight_decay=0.01))


@pytest.fixture(scope="module")
def one_mesh():
    return mesh.make_mesh(ONE)


def _train(demo, one_mesh, batches, spec: LoraSpec, family: lora_family.LoraFamily | None, seed: int = 5,
           optimizer=None):
    """Losses, grad norms and the adapters (in the run's own shapes) after ``batches``."""
    model, base = demo
    cfg = _cfg(spec)
    optimizer = optimizer or make_optimizer(cfg.train)
    own = lora.init_lora(model, spec, base, jax.random.key(seed))
    # B non-zero from the start, so every target's gradient flows both ways
    own = jax.tree_util.tree_map_with_path(
        lambda p, x: x + 0.01 * jax.random.normal(jax.random.key(len(str(p))), x.shape)
        if str(p[-1].key).endswith("_b") else x, own)
    trainable = own if family is None else lora_family.fit(own, lora.adapter_shapes(model, family.program))
    steps = step_lib.build_steps(model, cfg, optimizer, one_mesh, base, trainable, ce_chunk=8, family=family)
    state = steps.init_state(trainable)
    losses, norms = [], []
    for b in batches:
        state, m = steps.train_step(state, steps.put_batch(b))
        losses.append(float(m["loss"]))
        norms.append(float(m["grad_norm"]))
    evals = float(jax.device_get(steps.eval_step(state.params, batches[0]))["loss_sum"])
    params = state.params if family is None else lora_family.fit(state.params, own)
    return losses, norms, evals, jax.device_get(params), steps


@pytest.mark.parametrize("spec", [LoraSpec(rank=4, alpha=8.0, targets=("q", "v")),
                                  LoraSpec(rank=8, alpha=3.0, targets=("k", "o", "gate", "down"))],
                         ids=["r4-qv", "r8-mixed"])
def test_a_family_program_trains_as_the_exact_program(demo, one_mesh, make_batch, spec):
    batches = [make_batch(4, L, seed=s, packed=True) for s in SEEDS[:3]]
    sgd = optax.sgd(1.0)  # each step moves the adapters by their gradient: the values compare the gradients
    exact = _train(demo, one_mesh, batches, spec, None, optimizer=sgd)
    family = lora_family.resolve(spec, programs="family", platform="cpu", bucket=16)
    assert family.program.rank == 16 and family.program.targets == ("q", "k", "v", "o", "gate", "up", "down")
    fam = _train(demo, one_mesh, batches, spec, family, optimizer=sgd)
    np.testing.assert_allclose(fam[0], exact[0], rtol=2e-5)  # losses
    np.testing.assert_allclose(fam[1], exact[1], rtol=2e-4)  # grad norms: the padding adds nothing
    np.testing.assert_allclose(fam[2], exact[2], rtol=2e-5)  # eval
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(fam[3])[0], jax.tree.leaves(exact[3]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5, err_msg=jax.tree_util.keystr(path))
    assert min(exact[1]) > 0  # gradients flowed


def test_the_padded_rows_and_masked_targets_stay_exactly_zero(demo, one_mesh, make_batch):
    spec = LoraSpec(rank=4, alpha=8.0, targets=("q", "v"))
    family = lora_family.resolve(spec, programs="family", platform="cpu", bucket=16)
    model, base = demo
    cfg = _cfg(spec)
    own = lora.init_lora(model, spec, base, jax.random.key(0))
    trainable = lora_family.fit(own, lora.adapter_shapes(model, family.program))
    steps = step_lib.build_steps(model, cfg, make_optimizer(cfg.train), one_mesh, base, trainable, ce_chunk=8,
                                 family=family)
    state = steps.init_state(trainable)
    for s in SEEDS[2:]:
        state, _ = steps.train_step(state, steps.put_batch(make_batch(4, L, seed=s, packed=True)))
    for path, x in jax.tree_util.tree_flatten_with_path(jax.device_get(state.params))[0]:
        name = str(path[-1].key)
        x = np.asarray(x)
        if name[:-2] not in spec.targets:
            assert not x.any(), f"{jax.tree_util.keystr(path)}: a masked target moved"
        elif name.endswith("_a"):
            assert not x[:, spec.rank:].any() and x[:, :spec.rank].any()
        else:
            assert not x[spec.rank:].any() and x[:spec.rank].any()


def test_rank_alpha_and_targets_of_a_family_reuse_its_programs(demo, one_mesh, make_batch):
    model, base = demo
    batch = make_batch(4, L, seed=SEEDS[0], packed=True)
    made, cached = [], []
    for spec in (LoraSpec(rank=4, alpha=8.0, targets=("q", "v")), LoraSpec(rank=12, alpha=2.0),
                 LoraSpec(rank=8, alpha=16.0, targets=("down",))):
        family = lora_family.resolve(spec, programs="family", platform="cpu", bucket=16)
        trainable = lora_family.fit(lora.init_lora(model, spec, base, jax.random.key(0)),
                                    lora.adapter_shapes(model, family.program))
        cfg = _cfg(spec)
        steps = step_lib.build_steps(model, cfg, make_optimizer(cfg.train), one_mesh, base, trainable,
                                     ce_chunk=8, family=family)
        steps.train_step(steps.init_state(trainable), steps.put_batch(batch))
        made.append(steps._train)
        cached.append(steps._train.jitted._cache_size())
    assert made[0] is made[1] is made[2]  # one kept program
    assert cached[0] == cached[1] == cached[2]  # and nothing traced or compiled again


def test_the_bucket_rule_and_the_switch():
    assert lora_family.rank_bucket(8, "tpu") == 128 and lora_family.rank_bucket(130, "tpu") == 256
    assert lora_family.rank_bucket(8, "gpu") == 16 and lora_family.rank_bucket(40, "gpu") == 64
    assert lora_family.rank_bucket(8, "cpu", 32) == 32
    spec = LoraSpec(rank=8)
    assert lora_family.resolve(spec, programs="auto", platform="cpu") is None
    assert lora_family.resolve(spec, programs="auto", platform="tpu").program.rank == 128
    assert lora_family.resolve(spec, programs="exact", platform="tpu") is None
    assert lora_family.resolve(dataclasses.replace(spec, enabled=False), programs="family", platform="tpu") is None
    runtime = lora_family.resolve(LoraSpec(rank=3, alpha=6.0, targets=("q",)), programs="family",
                                  platform="tpu").runtime()
    assert float(runtime["scale"]) == 2.0 and runtime["rank_mask"].sum() == 3
    assert runtime["targets"]["q"] == 1 and runtime["targets"]["v"] == 0


def test_fit_pads_and_slices_back_to_the_same_values():
    own = {"l": {"q_a": np.arange(6.0).reshape(3, 2), "q_b": np.ones((2, 5))}}
    like = {"l": {"q_a": jax.ShapeDtypeStruct((3, 4), np.float32), "q_b": jax.ShapeDtypeStruct((4, 5), np.float32),
                  "v_a": jax.ShapeDtypeStruct((3, 4), np.float32)}}
    padded = lora_family.fit(own, like)
    assert padded["l"]["q_a"].shape == (3, 4) and not np.asarray(padded["l"]["v_a"]).any()
    back = lora_family.fit(padded, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), own))
    assert set(back["l"]) == {"q_a", "q_b"}
    np.testing.assert_array_equal(back["l"]["q_a"], own["l"]["q_a"])


RUN = dict(lora__rank=4, lora__alpha=8.0, lora__targets='["q", "v"]', train__steps=8, train__checkpoint_every=4,
           train__eval_every=4)
"""The demo run of ``family_runs`` (``fixtures_runs.train_demo``'s settings changed)."""


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory):
    """The same 8-step demo run (``RUN``: r4, q and v, alpha 8): its own program (the plain
    path's run); a family's (bucket 16), stopped at step 3 and resumed."""
    from fixtures_runs import StopAt, demo_overrides, train_demo

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train.loop import run_training

    root = tmp_path_factory.mktemp("family")
    exact, _ = train_demo(root, "exact", train__programs='"exact"', **RUN)
    cfg = load_config(None, demo_overrides(run__name='"family"', run__dir=f'"{root}"', train__programs='"family"',
                                           train__rank_bucket=16, **RUN))
    run = runs.create_run(cfg)
    assert run_training(cfg, run, control=StopAt(3)).state == "stopped"
    assert run_training(cfg, run, resume=True).state == "completed"
    return exact, run


def test_a_family_run_stopped_and_resumed_follows_the_exact_runs_curve(family_runs):
    exact, family = family_runs
    want = [(m["step"], m["loss"]) for m in exact.metrics()]
    got = [(m["step"], m["loss"]) for m in family.metrics()]
    assert [s for s, _ in got] == [s for s, _ in want] == list(range(1, 9))
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-4)
    evals = [(m["step"], m["eval_loss"]) for m in family.metrics() if "eval_loss" in m]
    assert evals and np.allclose([v for _, v in evals],
                                 [m["eval_loss"] for m in exact.metrics() if "eval_loss" in m], rtol=1e-4)


def test_a_family_runs_checkpoints_and_adapter_export_hold_its_own_rank(family_runs, tmp_path):
    import json

    from safetensors.numpy import load_file

    from adapters_lib.tuned import export_run, load_checkpoint

    _, family = family_runs
    _, _, adapters, step = load_checkpoint(family.path)
    assert step == 8
    shapes = {jax.tree_util.keystr(p): x.shape for p, x in jax.tree_util.tree_flatten_with_path(adapters)[0]}
    assert shapes and all(p.endswith(("['q_a']", "['q_b']", "['v_a']", "['v_b']")) for p in shapes)
    assert all(4 in s and 16 not in s for s in shapes.values()), shapes
    out = export_run(family.path, "adapter", out=tmp_path / "adapter")["out"]
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0
    tensors = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert tensors and all(4 in t.shape for t in tensors.values()), {k: t.shape for k, t in tensors.items()}
    assert out


class _WaitForCompiles:
    """A TrainControl that, after ``step`` updates, waits until the compile queue is idle (so a
    program compiling behind is ready before the next step) and records the metrics."""

    def __init__(self, step: int):
        self.step, self.seen, self.metrics = step, 0, []

    def should_stop(self) -> bool:
        return False

    def on_metrics(self, record: dict) -> None:
        import time

        self.metrics.append(record)
        if len(self.metrics) == 1:
            self.first_at = time.time()

    def on_event(self, record: dict) -> None:
        pass

    def between_steps(self) -> None:
        import time

        from adapters_lib.train import step_programs

        self.seen += 1
        if self.seen == self.step:
            t0 = time.monotonic()
            while any(j["state"] in ("queued", "compiling") for j in step_programs.jobs()):
                assert time.monotonic() - t0 < 300, step_programs.jobs()
                time.sleep(0.1)


def test_on_an_accelerator_a_tweak_starts_in_the_family_program_and_its_own_takes_over(tmp_path, monkeypatch, caplog):
    """The accelerator's path (compile behind forced on this CPU): a cold run compiles the
    family's program in the foreground (its own behind), so a rank/alpha/targets tweak then
    starts in the family's (nothing compiled in the foreground) while its own compiles behind
    and takes over — the loss curve that of its own program from start to end."""
    import logging

    from fixtures_runs import demo_overrides, train_demo

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train import compile_queue, own_program, step_programs
    from adapters_lib.train.loop import run_training

    monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_BEHIND", "1")
    monkeypatch.setenv(own_program.ENV, "0")  # the run's own compiles from the set-up on, however short the run
    step_programs.forget()
    settings = dict(train__steps=6, train__checkpoint_every=6, train__eval_every=6, train__programs='"family"',
                    train__rank_bucket=16)
    try:
        with caplog.at_level(logging.INFO, logger="adapters_lib"):
            seen: list[dict] = []
            stop = step_programs.listen(seen.append)
            try:
                train_demo(tmp_path, "cold", lora__rank=4, lora__targets='["q", "v"]', **settings)
            finally:
                stop()
            assert "the family's program compiles now and serves the run" in caplog.text
            # its first step's program compiles before the base eval (which finds the eval
            # step's compiled behind meanwhile), not after it: the first job in the foreground
            first = next(j for j in seen if j["where"] == "foreground")
            assert first["what"] == "train step", [(j["what"], j["where"], j["state"]) for j in seen]
            caplog.clear()
            tweak = dict(lora__rank=8, lora__alpha=4.0, lora__targets='["k", "o", "down"]')
            cfg = load_config(None, demo_overrides(run__name='"tweak"', run__dir=f'"{tmp_path}"', **settings, **tweak))
            control = _WaitForCompiles(3)
            import time

            t_tweak = time.time()
            assert run_training(cfg, runs.create_run(cfg), control=control).state == "completed"
            assert "the family's compiled program serves the run" in caplog.text
            assert "the run's own program took over at step 3" in caplog.text
            # the family's program was ready: the run's own compiles (queued at its set-up) waited
            # for step 1's metrics, their tracing off the set-up's and the first step's GIL
            behind = [j for j in step_programs.jobs() if j["queued_at"] >= t_tweak and j["where"] == "behind"]
            assert behind and all(j["started_at"] >= control.first_at for j in behind), behind
            # a run that ends before its own program starts compiling (the compile thread busy:
            # here held) drops it: the next runs' compiles do not queue behind it
            caplog.clear()
            t_short = time.time()
            hold = step_programs._behind().hold(compile_queue.ALL, "the test: nothing starts behind")
            try:
                short = load_config(None, demo_overrides(run__name='"short"', run__dir=f'"{tmp_path}"', **settings,
                                                         lora__rank=2, lora__alpha=2.0, lora__targets='["q"]'))
                assert run_training(short, runs.create_run(short)).state == "completed"
            finally:
                hold()
            assert "the family's compiled program serves the run" in caplog.text
            assert "the run's own program not started by its end" in caplog.text
            dropped = {j["what"] for j in step_programs.jobs() if j["queued_at"] >= t_short and j["state"] == "dropped"}
            assert "train step" in dropped, step_programs.jobs()
            # by default a run with less left than a compile takes never compiles its own program
            monkeypatch.delenv(own_program.ENV)
            caplog.clear()
            t_default = time.time()
            assert run_training(short, runs.create_run(short)).state == "completed"
            assert "the run's own program is not compiled" in caplog.text
            assert not [j for j in step_programs.jobs() if j["queued_at"] >= t_default and j["what"] == "train step"]
        monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_BEHIND", "0")
        exact, _ = train_demo(tmp_path, "exact", **{**settings, "train__programs": '"exact"'}, **tweak)
        np.testing.assert_allclose([m["loss"] for m in control.metrics if "loss" in m],
                                   [m["loss"] for m in exact.metrics()], rtol=1e-4)
    finally:
        step_programs.forget()


def test_a_checkpoints_finiteness_is_checked_alike_on_the_host_and_on_the_device():
    """``checkpoints.all_finite``: a small state (adapters) is fetched and checked in numpy, a
    large one by a program on the device; both see one NaN or inf anywhere, ints ignored."""
    import jax.numpy as jnp

    from adapters_lib.train import checkpoints

    good = {"a": jnp.ones((4, 8)), "b": [jnp.zeros(3, jnp.bfloat16), jnp.arange(5)]}
    for bad_value in (jnp.nan, jnp.inf):
        bad = {**good, "b": [good["b"][0].at[1].set(bad_value), good["b"][1]]}
        for host_bytes in (checkpoints.HOST_CHECK_BYTES, 0):  # the host's check, then the device's
            old, checkpoints.HOST_CHECK_BYTES = checkpoints.HOST_CHECK_BYTES, host_bytes
            try:
                assert checkpoints.all_finite(good) and not checkpoints.all_finite(bad)
            finally:
                checkpoints.HOST_CHECK_BYTES = old
    assert not checkpoints.all_finite(jax.device_get(bad))  # numpy leaves (a host fit)


def test_a_cold_start_compiles_the_first_step_before_the_base_eval_waits(family_runs, tmp_path, monkeypatch):
    """The accelerator's path (compile behind forced on this CPU), a cold start: the first train
    step's program compiles in the foreground while the eval step's compiles behind, before the
    hooks' start (the base model's eval); the first step then compiles nothing, and the curve is
    the plain path's (``family_runs``' exact run: the same settings, compile behind off)."""
    from fixtures_runs import demo_overrides

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train import step_programs
    from adapters_lib.train.hooks import TrainHook
    from adapters_lib.train.loop import run_training

    seen: list[dict] = []
    at_start: list[list[tuple[str, str, str]]] = []

    class Look(TrainHook):
        def on_start(self, session, step):
            at_start.append([(j["what"], j["where"], j["state"]) for j in seen])

    monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_BEHIND", "1")
    step_programs.forget()
    stop = step_programs.listen(seen.append)
    try:
        cfg = load_config(None, demo_overrides(run__name='"cold"', run__dir=f'"{tmp_path}"', **RUN))
        result = run_training(cfg, runs.create_run(cfg), hooks=lambda c: [Look(), *default_hooks(c)])
    finally:
        stop()
        step_programs.forget()
    [jobs] = at_start
    assert ("train step", "foreground", "ready") in jobs  # compiled before the base eval
    assert ("eval step", "behind", "queued") in jobs or ("eval step", "behind", "compiling") in jobs \
        or ("eval step", "behind", "ready") in jobs
    after = [(j["what"], j["where"]) for j in seen[len(jobs):]]
    assert ("train step", "foreground") not in after  # the first step compiled nothing
    plain = {m["step"]: m["loss"] for m in family_runs[0].metrics()}
    assert sorted(result.losses) == sorted(plain) == list(range(1, 9))
    np.testing.assert_allclose([result.losses[k] for k in sorted(result.losses)],
                               [plain[k] for k in sorted(plain)], rtol=1e-5)


def test_a_config_compiled_ahead_runs_its_own_programs_from_step_1_with_nothing_in_the_foreground(
        tmp_path, monkeypatch, caplog):
    """``prepare`` then launch on an accelerator (compile behind forced on this CPU), a family
    run: the family's train and eval steps, then the run's own train and eval steps, compile
    ahead; the launch serves from the run's own program and compiles nothing in the foreground
    (the chip, 2026-12-07: the own eval step had not been compiled ahead, and step 1 of a
    prepared ``max_length`` tweak waited 8.5 s for it). Without the own eval steps ready the
    family's program serves (every program it needs is ready)."""
    import logging

    from fixtures_runs import demo_overrides

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train import plan as plan_lib
    from adapters_lib.train import step_programs
    from adapters_lib.train.loop import run_training

    monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_BEHIND", "1")
    step_programs.forget()
    settings = dict(RUN, train__steps=4, train__programs='"family"', train__rank_bucket=16)
    seen: list[dict] = []
    stop = step_programs.listen(seen.append)
    caplog.set_level(logging.INFO, logger="adapters_lib")
    try:
        cfg = load_config(None, demo_overrides(run__name='"ahead"', run__dir=f'"{tmp_path}"', **settings))
        futures = plan_lib.compile_ahead(cfg)
        for f in futures:
            f.result(timeout=600)
        ahead = [j["what"] for j in seen if j["state"] == "ready"]
        assert ahead.count("train step") == 2 and ahead.count("eval step") >= 2, ahead  # family's and own
        caplog.clear()
        seen.clear()
        result = run_training(cfg, runs.create_run(cfg))
        assert result.state == "completed"
        assert "the run's own program (compiled before)" in caplog.text
        assert not [j for j in seen if j["where"] == "foreground"], seen
        # the run's own eval steps dropped (its train step kept): the family's serves instead
        plan = plan_lib.plan_run(cfg)
        assert plan.own_steps is None and plan.steps.evals_ready(plan.pipeline.eval_batches(cfg.train.eval_batches))
        own_eval = plan.steps._eval
        kept = dict(own_eval.compiled)
        own_eval.compiled.clear()
        own_eval.called.clear()
        try:
            caplog.clear()
            again = plan_lib.plan_run(cfg)
            assert again.own_steps is not None
            assert "the family's compiled program serves the run" in caplog.text
        finally:
            own_eval.compiled.update(kept)
    finally:
        stop()
        step_programs.forget()


def test_a_state_made_on_the_host_is_placed_as_the_devices_state(demo, make_batch):
    """Fresh adapters made on the host's CPU device (``plan.on_host``) for a mesh elsewhere (an
    accelerator's; here another CPU device): the optimizer's state is made on the host and
    moved (on a TPU its init program compiled per tree of shapes), the very state and steps the
    on-device init gives."""
    model, base = demo
    spec = LoraSpec(rank=4, alpha=8.0, targets=("q", "v"))
    cfg = _cfg(spec)
    optimizer = make_optimizer(cfg.train)
    elsewhere = mesh.make_mesh(ONE, devices=jax.devices()[1:2])  # not the host's device 0
    host = jax.devices()[0]
    own = jax.device_put(lora.init_lora(model, spec, base, jax.random.key(3)), host)
    steps = step_lib.build_steps(model, cfg, optimizer, elsewhere, jax.device_put(base, jax.devices()[1]),
                                 own, ce_chunk=8)
    from adapters_lib.train.compiled_steps import _host_device

    assert _host_device(own, elsewhere) == host
    placed = jax.device_put(own, steps.trainable_shardings)
    assert _host_device(placed, elsewhere) is None  # on the mesh already: the device's init
    a, b = steps.init_state(own), steps.init_state(placed)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.sharding.is_equivalent_to(y.sharding, x.ndim) and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert all(set(x.devices()) == {jax.devices()[1]} for x in jax.tree.leaves(a))
    batch = make_batch(4, L, seed=SEEDS[0], packed=True)
    (a, ma), (b, mb) = steps.train_step(a, steps.put_batch(batch)), steps.train_step(b, steps.put_batch(batch))
    assert float(ma["loss"]) == float(mb["loss"])
