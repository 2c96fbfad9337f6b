"""The training loop's products: the run directory contract, tuned params, the optimizer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fixtures_runs import TRAINED_DEMO_STEPS

from adapters_lib.config import TrainSpec
from adapters_lib.runs import RunDir, read_jsonl

CONTRACT_KEYS = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_time_s"}


def test_every_step_has_a_metrics_line_with_the_contract_keys(trained_demo_run):
    metrics = RunDir(trained_demo_run).metrics()
    assert [m["step"] for m in metrics] == list(range(1, TRAINED_DEMO_STEPS + 1))
    for m in metrics:
        assert CONTRACT_KEYS <= m.keys()
        assert all(math.isfinite(m[k]) for k in CONTRACT_KEYS)
        assert m["tokens_per_s"] > 0 and m["step_time_s"] > 0 and m["grad_norm"] > 0
    assert [m["step"] for m in metrics if "eval_loss" in m] == [20, 40]


def test_loss_and_eval_loss_fall_on_the_demo(trained_demo_run):
    metrics = RunDir(trained_demo_run).metrics()
    losses = [m["loss"] for m in metrics]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    evals = [m["eval_loss"] for m in metrics if "eval_loss" in m]
    assert evals[1] < evals[0]


def test_learning_rate_follows_warmup_then_cosine(trained_demo_run):
    metrics = RunDir(trained_demo_run).metrics()
    lrs = [m["lr"] for m in metrics]
    peak = max(lrs)
    assert lrs.index(peak) == 5  # warmup_steps = 5: step 6 is the first at the peak
    assert peak == pytest.approx(0.005)
    assert lrs[0] < lrs[1] < lrs[4] and lrs[-1] < lrs[20] < peak


def test_status_and_events_record_the_states(trained_demo_run):
    run = RunDir(trained_demo_run)
    status = json.loads(run.status_path.read_text())
    assert status["state"] == "completed" and status["step"] == TRAINED_DEMO_STEPS
    assert status["total_steps"] == TRAINED_DEMO_STEPS and status["updated"] > 0
    last = run.metrics()[-1]
    assert last["step"] == TRAINED_DEMO_STEPS  # the status's loss is the last step's, as
    assert status["loss"] == status["final_loss"] == last["loss"]  # Runs and Train show it
    events = run.events()
    states = [e["state"] for e in events if e["kind"] == "state"]
    assert states == ["queued", "running", "completed"]
    assert [e["step"] for e in events if e["kind"] == "checkpoint"] == [20, 40]
    assert all({"time", "kind"} <= e.keys() for e in events)


def test_checkpoints_hold_the_adapters_only_and_load_tuned_restores_them(trained_demo_run):
    import jax

    from adapters_lib import lora
    from adapters_lib.tuned.checkpoint import load_checkpoint as load_tuned

    assert RunDir(trained_demo_run).checkpoints() == [20, 40]
    cfg, loaded, adapters, step = load_tuned(trained_demo_run)
    assert step == TRAINED_DEMO_STEPS and cfg.train.steps == TRAINED_DEMO_STEPS
    assert lora.count_params(adapters) == lora.expected_lora_params(loaded.config, cfg.lora)
    base, none = lora.split_lora(adapters)
    assert base == {} and none  # nothing but adapter params is stored
    flat = jax.tree_util.tree_leaves_with_path(adapters)
    b_norm = sum(float(np.abs(np.asarray(x)).sum()) for p, x in flat if p[-1].key.endswith("_b"))
    assert b_norm > 0  # B moved off its zero init
    _, _, at20, step20 = load_tuned(trained_demo_run, step=20)
    assert step20 == 20
    leaves40, leaves20 = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)]) for t in (adapters, at20))
    assert not np.allclose(leaves40, leaves20)


def test_load_tuned_names_missing_steps(trained_demo_run):
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.tuned import load_checkpoint

    with pytest.raises(WorkbenchError, match="no checkpoint at step 7"):
        load_checkpoint(trained_demo_run, step=7)


def test_readers_skip_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo', encoding="utf-8")
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]


def test_run_ids_are_dated_named_and_unique(tmp_path):
    from adapters_lib.config import load_config
    from adapters_lib.runs import create_run, list_runs

    cfg = load_config(None, ["run.name=my run/1"])
    a = create_run(cfg, root=tmp_path, now=0)
    b = create_run(cfg, root=tmp_path, now=0)
    c = create_run(load_config(None), root=tmp_path, now=0)
    assert a.run_id.endswith("-my-run-1") and b.run_id == a.run_id + "-2"
    assert c.run_id.endswith("-demo") and len(c.run_id.split("-")[0]) == 8
    assert {r.run_id for r in list_runs(tmp_path)} == {a.run_id, b.run_id, c.run_id}
    assert a.status()["state"] == "queued" and a.config() == cfg


def test_status_writes_replace_the_file_atomically(tmp_path):
    from adapters_lib.config import load_config
    from adapters_lib.runs import create_run

    run = create_run(load_config(None), root=tmp_path)
    run.write_status("running", step=3, total_steps=10)
    run.write_status("stopping")
    status = run.status()
    assert status["state"] == "stopping" and status["step"] == 3  # fields merge
    assert sorted(p.name for p in run.path.iterdir() if p.name.startswith(".")) == []
    with pytest.raises(ValueError):
        run.write_status("paused")


# --------------------------------------------------------------------------- optimizer


def _spec(**kw) -> TrainSpec:
    return TrainSpec(**{"steps": 100, "learning_rate": 1e-2, "warmup_steps": 10, **kw})


@pytest.mark.parametrize("schedule, at_end", [("constant", 1e-2), ("linear", 0.0), ("cosine", 0.0)])
def test_schedules_warm_up_to_the_peak_then_decay(schedule, at_end):
    from adapters_lib.train.optimizer import make_schedule

    lr = make_schedule(_spec(schedule=schedule))
    assert float(lr(0)) == pytest.approx(1e-2 / 11)
    assert float(lr(10)) == pytest.approx(1e-2)
    assert float(lr(100)) == pytest.approx(at_end, abs=1e-9)
    if schedule != "constant":
        assert float(lr(50)) < 1e-2


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("steps, warmup", [(100, 10), (40, 0), (5, 9)])
def test_schedules_equal_optax_warmup_then_decay(schedule, steps, warmup):
    """The step's own schedule (its numbers are inputs) gives optax's composition of the same."""
    import optax

    from adapters_lib.train.optimizer import make_schedule

    peak = 3e-3
    w = min(warmup, steps - 1)
    decay = max(steps - w, 1)
    after = {"constant": optax.constant_schedule(peak), "linear": optax.linear_schedule(peak, 0.0, decay),
             "cosine": optax.cosine_decay_schedule(peak, decay)}[schedule]
    want = after if w == 0 else optax.join_schedules([optax.linear_schedule(peak / (w + 1), peak, w), after], [w])
    got = make_schedule(_spec(schedule=schedule, steps=steps, warmup_steps=warmup, learning_rate=peak))
    for count in range(0, steps + 3):
        assert float(got(count)) == pytest.approx(float(want(count)), rel=1e-5, abs=1e-10), count


def test_weight_decay_skips_norms_scales_and_vectors():
    from adapters_lib.train.optimizer import decay_mask

    params = {"layer_0": {"attn": {"q_einsum": {"w": np.ones((2, 3, 4))}, "_query_norm": {"scale": np.ones(4)}},
                          "pre_ffw_norm": {"scale": np.ones(4)}, "bias": np.ones(3)},
              "lora": {"q_a": np.ones((4, 2))}}
    mask = decay_mask(params)
    assert mask["layer_0"]["attn"]["q_einsum"]["w"] and mask["lora"]["q_a"]
    assert not mask["layer_0"]["attn"]["_query_norm"]["scale"]
    assert not mask["layer_0"]["pre_ffw_norm"]["scale"] and not mask["layer_0"]["bias"]


def test_gradients_are_clipped_to_clip_norm():
    import jax.numpy as jnp
    import optax

    from adapters_lib.train.optimizer import make_optimizer

    params = {"w": jnp.zeros((3, 3))}
    grads = {"w": jnp.full((3, 3), 100.0)}
    for clip, expect_clipped in ((1.0, True), (0.0, False)):
        opt = make_optimizer(_spec(clip_norm=clip, schedule="constant", warmup_steps=0))
        state = opt.init(params)
        _, state = opt.update(grads, state, params)
        adam_mu = optax.tree.get(state, "mu")["w"]
        # Adam's first moment is (1 - b1) × the (clipped) gradient
        norm = float(jnp.linalg.norm(adam_mu / 0.1))
        assert (norm == pytest.approx(1.0, rel=1e-5)) == expect_clipped


# --------------------------------------------------------------------------- hooks


class Recorder:
    """A hook that records what the trainer tells it, and stops the run after ``stop_after``."""

    name = "early-stop"

    def __init__(self, stop_after: int):
        self.stop_after = stop_after
        self.calls: list[tuple] = []

    def on_start(self, session, step):
        self.session = session
        self.calls.append(("start", step, session.run.run_id))
        self.logits = [self._score()]

    def on_step(self, step, metrics):
        self.calls.append(("step", step, metrics["loss"]))

    def on_eval(self, step, results):
        self.calls.append(("eval", step, sorted(results)))
        self.logits.append(self._score())

    def _score(self):
        """The probe's model on one prompt: the logits of its last token, as numbers."""
        import jax.numpy as jnp

        probe = self.session.probe
        ids = probe.tokenizer.encode("Is 7 even or odd?")
        tokens = jnp.asarray([ids], jnp.int32)
        positions = jnp.arange(len(ids))[None]
        mask = jnp.tril(jnp.ones((1, len(ids), len(ids)), bool))
        with probe.scope():
            logits = probe.apply_fn(probe.params(), tokens, positions, mask)
        return np.asarray(logits[0, -1])

    def on_checkpoint(self, step):
        self.calls.append(("checkpoint", step))
        if step == 2:
            self.session.pin(2)  # kept whatever keep_checkpoints says

    def should_stop(self):
        return any(c[0] == "step" and c[1] >= self.stop_after for c in self.calls)

    def on_end(self, result):
        self.calls.append(("end", result.state, result.step))


def test_hooks_see_steps_evals_checkpoints_and_can_end_the_run_early(tmp_path):
    from fixtures_runs import demo_overrides

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train.hooks import TrainHook
    from adapters_lib.train.loop import run_training

    cfg = load_config(None, demo_overrides(run__dir=f'"{tmp_path}"', train__steps=8, train__eval_every=3,
                                           train__checkpoint_every=2, train__keep_checkpoints=1))
    run = runs.create_run(cfg)
    hook = Recorder(stop_after=6)
    assert not isinstance(hook, TrainHook)  # duck-typed hooks work as well as subclasses
    result = run_training(cfg, run, hooks=[hook])
    assert result.state == "completed" and result.step == 6
    status = run.status()
    assert status["state"] == "completed" and "stopped early by early-stop at step 6" in status["message"]
    kinds = [c[0] for c in hook.calls]
    assert hook.calls[0] == ("start", 0, run.run_id) and hook.calls[-1] == ("end", "completed", 6)
    assert [c[1] for c in hook.calls if c[0] == "step"] == [1, 2, 3, 4, 5, 6]
    assert [c[1:] for c in hook.calls if c[0] == "eval"] == [(3, ["eval_loss"]), (6, ["eval_loss"])]
    assert [c[1] for c in hook.calls if c[0] == "checkpoint"] == [2, 4, 6]
    assert kinds.index("checkpoint") > kinds.index("step")
    steps_written = {m["step"]: m["loss"] for m in run.metrics()}
    assert {c[1]: c[2] for c in hook.calls if c[0] == "step"} == steps_written
    # keep_checkpoints = 1 pruned 2 at the save of 6 (4 confirmed), but the hook pinned it
    assert run.checkpoints() == [2, 4, 6] and not run.owner_path.exists()
    base, at3, _ = hook.logits
    assert base.shape == at3.shape and np.isfinite(at3).all()
    assert not np.allclose(base, at3)  # the probe holds the params of the eval's step


def test_a_runs_final_checkpoint_is_placed_from_memory_as_orbax_reads_it(tmp_path):
    """The final adapters a run wrote are kept in this process: the Compare's load places them
    (no orbax read) with the values, dtypes and placement orbax's restore gives; a step folder
    written again (or gone) is read from disk."""
    import shutil

    import jax
    from fixtures_runs import train_demo

    from adapters_lib.models.loader import load_model
    from adapters_lib.train import checkpoints

    run, result = train_demo(tmp_path, "kept", train__steps=3, train__checkpoint_every=3, train__eval_every=3)
    assert result.state == "completed"
    cfg = run.config()
    abstract = checkpoints.abstract_trainable(load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype), cfg)
    assert str(run.checkpoints_dir.absolute()) in checkpoints._SAVED
    kept = checkpoints._saved(run.checkpoints_dir, 3, abstract)
    assert kept is not None and checkpoints._saved(run.checkpoints_dir, 2, abstract) is None
    saved = dict(checkpoints._SAVED)
    checkpoints._SAVED.clear()
    read = checkpoints.restore_params(run.checkpoints_dir, 3, abstract)
    for k, r in zip(jax.tree.leaves(kept), jax.tree.leaves(read), strict=True):
        assert k.dtype == r.dtype and k.sharding == r.sharding
        np.testing.assert_array_equal(np.asarray(k), np.asarray(r))
    checkpoints._SAVED.update(saved)
    copy = tmp_path / "copy"
    shutil.copytree(run.checkpoints_dir / "3", copy)
    shutil.rmtree(run.checkpoints_dir / "3")
    shutil.copytree(copy, run.checkpoints_dir / "3")  # written again: another folder
    assert checkpoints._saved(run.checkpoints_dir, 3, abstract) is None
