"""DPO: the loss against gemma's ``DpoLoss``, preference data from every layout, a
sharded step against one device, and a run that checkpoints, resumes and exports like SFT."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from fixtures_mesh import random_batch
from test_dpo_data import _write

from adapters_lib import mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.train import step as step_lib

L = 32
P = 4


def _pairs(pairs: int, length: int, seed: int) -> dict[str, np.ndarray]:
    """Random chosen/rejected rows whose loss is on the second half only (the answers)."""
    out = {}
    for side, s in (("chosen", seed), ("rejected", seed + 100)):
        rows = random_batch(pairs, length, s)
        rows["loss_mask"][:, : length // 2] = 0
        out.update({f"{side}_{k}": v for k, v in rows.items()})
    return out


def _cfg(shape=(1, 1, 1), **train) -> RunConfig:
    t = dict(batch_size=P, objective="dpo", beta=0.5, label_smoothing=0.1, sft_weight=0.0)
    t.update(train)
    return RunConfig(mesh=MeshSpec(*shape, devices=int(np.prod(shape))), data=DataSpec(max_length=L),
                     lora=LoraSpec(rank=4), train=TrainSpec(**t))


def _logits(model, params, batch, side):
    from adapters_lib.train.loss import attention_mask

    return model.apply({"params": params}, jnp.asarray(batch[f"{side}_tokens"]),
                       positions=jnp.asarray(batch[f"{side}_positions"]),
                       attention_mask=attention_mask(jnp.asarray(batch[f"{side}_segment_ids"]))).logits


def test_dpo_loss_equals_gemma_dpo_loss_on_the_same_log_probs(demo, lora_params):
    """The step's DPO loss (chunked cross-entropy at the answer positions, the reference the
    base with the adapters off) equals ``gm.losses.DpoLoss`` on full logits of the LoRA model
    (policy) and the base (anchor); its reward metrics follow from the same margins."""
    from gemma import gm

    from adapters_lib import lora

    model, base = demo
    cfg = _cfg()
    trainable = lora_params(cfg.lora)
    batch = _pairs(P, L, seed=5)
    batch["chosen_loss_mask"][P - 1] = 0  # a padding pair: weighs nothing
    batch["rejected_loss_mask"][P - 1] = 0
    steps = step_lib.build_steps(model, cfg, optax.sgd(0.1), mesh.make_mesh(cfg.mesh), base, trainable)
    out = jax.device_get(steps.eval_step(steps.init_state(trainable).params, steps.put_batch(batch)))
    assert float(out["weight"]) == P - 1

    net, merged = lora.wrap(model, cfg.lora), lora.merge_lora(base, trainable)
    policy = jnp.stack([_logits(net, merged, batch, s) for s in ("chosen", "rejected")], axis=1)
    anchor = jnp.stack([_logits(model, base, batch, s) for s in ("chosen", "rejected")], axis=1)
    targets = jnp.stack([batch["chosen_targets"], batch["rejected_targets"]], axis=1)
    masks = jnp.stack([batch["chosen_loss_mask"], batch["rejected_loss_mask"]], axis=1) > 0
    want = gm.losses.DpoLoss(tau=0.5, label_smoothing=0.1, tokens="t", sequence_mask="m", policy_logits="p",
                             anchor_logits="a").get_values(tokens=targets[:-1], sequence_mask=masks[:-1],
                                                           policy_logits=policy[:-1], anchor_logits=anchor[:-1])
    np.testing.assert_allclose(out["loss_sum"] / out["weight"], float(jnp.mean(want)), rtol=2e-5)
    assert abs(float(jnp.mean(want)) - np.log(2)) > 1e-3  # the adapters move the policy off the reference

    logp = jax.nn.log_softmax(policy.astype(jnp.float32))
    picked = jnp.sum(jnp.take_along_axis(logp, targets[..., None], -1)[..., 0] * masks, -1)[:-1]  # [P-1, 2]
    ref = jax.nn.log_softmax(anchor.astype(jnp.float32))
    ref_picked = jnp.sum(jnp.take_along_axis(ref, targets[..., None], -1)[..., 0] * masks, -1)[:-1]
    margin = 0.5 * ((picked[:, 0] - ref_picked[:, 0]) - (picked[:, 1] - ref_picked[:, 1]))
    w = out["weight"]
    # the margin is a difference of summed log-probs (~110 here) taken on two paths (chunked
    # cross-entropy, full log-softmax): its float32 error is ulps of those sums, not of itself
    # (a mean margin near 0 is as exact as a large one)
    ulps = 4 * float(np.spacing(np.float32(max(float(jnp.max(jnp.abs(picked))), float(jnp.max(jnp.abs(ref_picked)))))))
    np.testing.assert_allclose(out["reward_margin"] / w, float(jnp.mean(margin)), rtol=1e-4, atol=ulps)
    np.testing.assert_allclose(out["reward_accuracy"] / w, float(jnp.mean(margin > 0)), atol=1e-6)
    np.testing.assert_allclose(out["chosen_logp"] / w, float(jnp.mean(picked[:, 0])), rtol=1e-5)
    np.testing.assert_allclose(out["rejected_logp"] / w, float(jnp.mean(picked[:, 1])), rtol=1e-5)


def test_sft_weight_adds_the_chosen_answers_cross_entropy_per_token():
    """``train.sft_weight = w``: the loss is DPO's plus w × the chosen answer's NLL per token
    (LLaMA-Factory's pref_ftx); a pair without answer tokens still weighs nothing."""
    from adapters_lib.train.objectives import Forward
    from adapters_lib.train.objectives.dpo import DPO, dpo_loss

    policy_nll = jnp.array([[3.0, 9.0], [6.0, 4.0], [2.0, 2.0]])  # per pair: chosen, rejected
    reference_nll = jnp.array([[4.0, 8.0], [5.0, 5.0], [2.0, 2.0]])
    forward = Forward(policy=lambda b, per_row=False: policy_nll.reshape(-1),
                      reference=lambda b: reference_nll.reshape(-1))
    batch = {f"{side}_{k}": jnp.zeros((3, 8)) for side in ("chosen", "rejected")
             for k in ("tokens", "targets", "positions", "segment_ids")}
    batch["chosen_loss_mask"] = jnp.array([[1.0] * 3 + [0.0] * 5, [1.0] * 2 + [0.0] * 6, [0.0] * 8])
    batch["rejected_loss_mask"] = jnp.array([[1.0] * 5 + [0.0] * 3, [1.0] * 4 + [0.0] * 4, [0.0] * 8])
    plain, metrics = DPO(beta=0.5, sft_weight=0.0).loss(forward, batch)
    weighted, same = DPO(beta=0.5, sft_weight=2.0).loss(forward, batch)
    per_pair, _ = dpo_loss(-policy_nll[:, 0], -policy_nll[:, 1], -reference_nll[:, 0], -reference_nll[:, 1],
                           beta=0.5)
    np.testing.assert_allclose(plain, per_pair[0] + per_pair[1], rtol=1e-6)
    np.testing.assert_allclose(weighted, plain + 2.0 * (3.0 / 3 + 6.0 / 2), rtol=1e-6)
    assert {k: float(v) for k, v in metrics.items()} == {k: float(v) for k, v in same.items()}


def test_length_norm_compares_the_answers_log_probs_per_token_so_a_long_rejected_answer_cannot_win_alone():
    """Issue 41: with summed log-probs a rambling rejected answer lowered by a little on each of
    its many tokens saturates the margin by itself (the chosen answer, its end-of-turn marker
    included, need not move); ``length_norm`` compares per-token means, so the same drop
    counts as one token's worth whatever the length. Rewards follow the margin's scale."""
    from adapters_lib.train.objectives import Forward
    from adapters_lib.train.objectives.dpo import DPO

    def margin(rejected_tokens: int, length_norm: bool) -> tuple[float, dict]:
        # chosen: 4 tokens, unchanged; rejected: 0.5 nats less likely on each of its tokens
        policy = jnp.array([[8.0, 3.0 * rejected_tokens + 0.5 * rejected_tokens]])
        reference = jnp.array([[8.0, 3.0 * rejected_tokens]])
        forward = Forward(policy=lambda b, per_row=False: policy.reshape(-1), reference=lambda b: reference.reshape(-1))
        batch = {f"{side}_{k}": jnp.zeros((1, 128)) for side in ("chosen", "rejected")
                 for k in ("tokens", "targets", "positions", "segment_ids")}
        batch["chosen_loss_mask"] = jnp.zeros((1, 128)).at[0, :4].set(1.0)
        batch["rejected_loss_mask"] = jnp.zeros((1, 128)).at[0, :rejected_tokens].set(1.0)
        _, m = DPO(beta=0.1, sft_weight=0.0, length_norm=length_norm).loss(forward, batch)
        return float(m["reward_margin"]), {k: float(v) for k, v in m.items()}

    assert margin(10, False)[0] == pytest.approx(0.5) and margin(100, False)[0] == pytest.approx(5.0)
    for n in (10, 100):
        got, m = margin(n, True)
        assert got == pytest.approx(0.05)  # β × 0.5 nats per token, whatever the length
        assert m["chosen_reward"] == 0 and m["rejected_reward"] == pytest.approx(-0.05)
        assert m["rejected_logp"] == pytest.approx(-3.5 * n)  # the log-prob metrics stay sums


def test_a_dpo_config_defaults_to_the_chosen_answers_cross_entropy_beside_the_margin():
    """Issue 41: from the pretrained 270M, plain DPO (sft_weight 0) saturated the reward and left
    the answers long (and garbled); ``sft_weight = 1`` (RPO) made them short: it is the default."""
    from adapters_lib.config import load_config
    from adapters_lib.train.objectives import for_config

    cfg = load_config(None, ['train.objective="dpo"'])
    objective = for_config(cfg)
    assert (objective.sft_weight, objective.length_norm, objective.beta) == (1.0, False, 0.1)
    assert for_config(load_config(None, ['train.objective="dpo"', "train.sft_weight=0"])).sft_weight == 0


def test_a_sharded_dpo_step_equals_the_one_device_step(demo, lora_params):
    """data × fsdp = 2×2 on 4 simulated devices, the batch split 4 ways and the params over
    fsdp: each pair's rows stay together. (The tensor axis is the SFT step's own, checked on
    2×2×2 and 2×1×4 in test_sharding_parity; on 8 devices this test compiled ~4 s longer.)"""
    model, base = demo
    shape = (2, 2, 1)
    trainable = lora_params(LoraSpec(rank=4))
    batch = _pairs(8, L, seed=9)
    results = []
    for s in ((1, 1, 1), shape):
        cfg = _cfg(s, batch_size=8)
        steps = step_lib.build_steps(model, cfg, optax.sgd(0.5), mesh.make_mesh(cfg.mesh), base, trainable)
        state, metrics = steps.train_step(steps.init_state(trainable), steps.put_batch(batch))
        results.append((jax.device_get(metrics), jax.device_get(state.params)))
    (m1, p1), (m8, p8) = results
    for k in ("loss", "grad_norm", "reward_margin", "chosen_logp", "rejected_logp", "reward_accuracy"):
        np.testing.assert_allclose(m8[k], m1[k], rtol=1e-4, atol=1e-6, err_msg=k)
    for got, want in zip(jax.tree.leaves(p8), jax.tree.leaves(p1), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # reduction order: ~3e-6


def test_dpo_config_keys_are_checked_by_name():
    from adapters_lib.config import load_config
    from adapters_lib.errors import WorkbenchError

    cfg = load_config(None, ['train.objective="dpo"', "train.beta=0.2", 'train.reference="run:abc@40"'])
    assert (cfg.train.objective, cfg.train.beta, cfg.train.reference) == ("dpo", 0.2, "run:abc@40")
    for bad, where in ((['train.objective="ppo"'], "objective"), (["train.beta=0"], "beta"),
                       (["train.sft_weight=-1"], "sft_weight"),
                       (["train.label_smoothing=0.5"], "label_smoothing"),
                       (['train.reference="abc"'], "reference"),
                       (['train.objective="dpo"', "lora.enabled=false"], "enabled")):
        with pytest.raises(WorkbenchError) as err:
            load_config(None, bad)
        assert where in str(err.value) and "\n" not in str(err.value)


def test_a_reference_run_that_is_not_there_is_one_line_naming_the_key(tmp_path):
    from adapters_lib.config import load_config
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.train.objectives.dpo import load_reference_adapters

    cfg = load_config(None, ['train.objective="dpo"', 'train.reference="run:nope@3"', f'run.dir="{tmp_path}"'])
    with pytest.raises(WorkbenchError) as err:
        load_reference_adapters(cfg, cfg.train.reference, {})
    assert "[train] reference" in str(err.value) and "'nope'" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- a run


def _short_over_long(path, n: int = 24) -> str:
    rows = [{"prompt": f"Say {w}.", "chosen": f"{w}.",
             "rejected": f"I will now say the word that you asked for, which is {w}, as you asked."}
            for w in ("red", "blue", "green", "cat", "dog", "sun", "moon", "tree")[: n // 3] * 3]
    return _write(path, [dict(r, prompt=f"{r['prompt']} ({i})") for i, r in enumerate(rows)])


def _dpo_overrides(root, data, **changes) -> list[str]:
    from fixtures_runs import demo_overrides

    return demo_overrides(**{**dict(
        run__dir=f'"{root}"', data__path=f'"{data}"', data__max_length=40, data__eval_fraction=0.25,
        train__objective='"dpo"', train__beta=0.5, train__sft_weight=0.0, train__steps=6, train__batch_size=4, train__eval_every=3,
        train__checkpoint_every=3, train__learning_rate=0.01), **changes})


@pytest.fixture(scope="module")
def dpo_run(tmp_path_factory):
    """A 6-step DPO run on the demo (short answers over long; checkpoints at 3 and 6), trained
    once for this module's run tests: (its overrides, its RunDir, its result). It also scores
    the task metric exact_match at each eval (the overrides returned leave it out)."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    root = tmp_path_factory.mktemp("dpo-run")
    overrides = _dpo_overrides(root, _short_over_long(root / "prefs.jsonl"))
    cfg = load_config(None, [*overrides, 'train.eval_metrics=["loss", "exact_match"]'])
    run = runs.create_run(cfg)
    result = run_training(cfg, run, hooks=default_hooks)
    assert result.state == "completed" and result.step == 6, result
    return overrides, run, result


def test_a_dpo_run_writes_its_metrics_checkpoints_resumes_and_exports_like_sft(dpo_run, tmp_path):
    from fixtures_runs import StopAt

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.runs import RunDir
    from adapters_lib.train.loop import run_training
    from adapters_lib.tuned import export_run

    overrides, straight_run, straight = dpo_run
    cfg = load_config(None, overrides)
    records = RunDir(straight.run_dir).metrics()
    assert [m["step"] for m in records] == list(range(1, 7))
    for m in records:
        assert {"loss", "reward_margin", "reward_accuracy", "chosen_logp", "rejected_logp"} <= set(m)
    assert {"eval_loss", "eval_reward_accuracy", "eval_reward_margin"} <= set(records[2]) | set(records[5])
    assert records[0]["loss"] == pytest.approx(np.log(2), abs=1e-4)  # step 1: the policy is the reference
    assert records[-1]["reward_margin"] > records[0]["reward_margin"]

    run = runs.create_run(cfg)
    stopped = run_training(cfg, run, control=StopAt(2), hooks=default_hooks)
    assert stopped.state == "stopped" and run.checkpoints() == [2]
    resumed = run_training(cfg, run, resume=True, hooks=default_hooks)
    assert resumed.state == "completed" and run.checkpoints()[-1] == 6
    for step, loss in straight.losses.items():
        assert resumed.losses.get(step, stopped.losses.get(step)) == pytest.approx(loss, rel=1e-5), step

    out = export_run(run.path, "adapter", out=tmp_path / "adapter")
    assert out["step"] == 6 and (tmp_path / "adapter").is_dir()


def test_a_dpo_runs_metrics_reach_tensorboard_and_its_eval_rows_hold_the_task_metrics(dpo_run):
    """TensorBoard holds each DPO metric at each logged step with metrics.jsonl's value
    (eval_* at the evals); eval.jsonl's rows score the task metric (exact_match against the
    chosen answers) for the base and the tuned model, as for SFT."""
    import sys
    import types

    from adapters_lib.evals import records
    from adapters_lib.runs import RunDir

    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _, _, straight = dpo_run
    metrics = RunDir(straight.run_dir).metrics()
    acc = event_accumulator.EventAccumulator(str(straight.run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    for key in ("loss", "reward_margin", "reward_accuracy", "chosen_logp", "rejected_logp",
                "eval_reward_accuracy", "eval_reward_margin"):
        want = {m["step"]: m[key] for m in metrics if key in m}
        assert want and {e.step: e.value for e in acc.Scalars(key)} == pytest.approx(want, rel=1e-6), key

    rows = records.read_rows(straight.run_dir)
    assert [(r["step"], r["phase"]) for r in rows] == [(0, "base"), (3, "tuned"), (6, "tuned")]
    for r in rows:
        assert 0 <= r["exact_match"] <= 1 and r["loss"] > 0, r
    assert {e.step for e in acc.Scalars("tuned/exact_match")} == {3, 6}


def test_a_reference_run_is_that_runs_adapters_and_the_policy_starts_from_them(dpo_run):
    """``reference = "run:ID@STEP"``: the reference is that run's checkpoint (the one the tuned
    model of ``sample``/``compare`` loads), and the trained adapters start from it (DPO after
    SFT, as TRL does): at step 1 every reward is 0, the loss is log 2, and the log-probs are
    that checkpoint's on the same batch, not the base's."""
    import optax

    from adapters_lib import runs, tuned
    from adapters_lib.config import load_config
    from adapters_lib.data import build_pipeline
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training
    from adapters_lib.train.objectives.dpo import load_reference_adapters

    overrides, run, straight = dpo_run
    cfg = load_config(None, [*overrides, f'train.reference="run:{run.run_id}@3"', "train.steps=1"])
    at3 = tuned.load_run_model(run, 3)
    assert at3.step == 3 and run.checkpoints()[-1] == 6  # @3: not the latest
    for got, want in zip(jax.tree.leaves(load_reference_adapters(cfg, cfg.train.reference, at3.adapters)),
                         jax.tree.leaves(at3.adapters), strict=True):
        np.testing.assert_array_equal(got, want)

    batch = build_pipeline(cfg.data, None, batch_size=4, seed=cfg.train.seed, kind="pairs").train_batch(0)
    steps = step_lib.build_steps(at3.loaded.model, cfg, optax.sgd(0.0), mesh.make_mesh(cfg.mesh),
                                 at3.loaded.params, at3.adapters)
    out = jax.device_get(steps.eval_step(steps.init_state(at3.adapters).params, steps.put_batch(batch)))
    at3_chosen = float(out["chosen_logp"]) / float(out["weight"])  # that checkpoint's, on step 1's batch

    first = run_training(cfg, runs.create_run(cfg), hooks=default_hooks)
    assert first.state == "completed", first
    m = runs.RunDir(first.run_dir).metrics()[0]
    assert m["loss"] == pytest.approx(np.log(2), abs=1e-5)
    for key in ("reward_margin", "chosen_reward", "rejected_reward"):
        assert m[key] == pytest.approx(0, abs=1e-6), key
    assert m["chosen_logp"] == pytest.approx(at3_chosen, rel=1e-5)
    base_chosen = runs.RunDir(straight.run_dir).metrics()[0]["chosen_logp"]  # step 1 from the base
    assert abs(m["chosen_logp"] - base_chosen) > 1e-2


def test_compare_on_a_dpo_run_answers_base_and_tuned_as_for_sft(dpo_run):
    from adapters_lib import tuned
    from adapters_lib.sample.settings import SamplingSettings

    _, run, _ = dpo_run
    got = tuned.load_run_model(run).compare(["Say red. (0)", "Say moon. (5)"], SamplingSettings(max_new_tokens=6))
    assert [g["prompt"] for g in got] == ["Say red. (0)", "Say moon. (5)"]
    for g in got:
        assert g["step"] == 6 and g["settings"]["max_new_tokens"] == 6
        assert isinstance(g["base"], str) and isinstance(g["tuned"], str) and (g["base"] or g["tuned"])


@pytest.mark.anyio
async def test_the_train_screen_plots_a_dpo_runs_reward_accuracy_where_sft_plots_the_lr(dpo_run):
    """The Train screen (Pilot) on the DPO run's own records (metrics.jsonl, config, events):
    the second plot is the reward accuracy, train and eval, with the run's values."""
    import tomllib

    from fixtures_tui import StaticClient

    from adapters_lib.engine import api
    from workbench.app import WorkbenchApp
    from workbench.widgets.plot import PlotView

    _, run, _ = dpo_run

    class RunFolderClient(StaticClient):  # the engine's list/get/stream replies, from the folder
        def record(self, metrics=True, events=True):
            return {"id": run.run_id, "run_id": run.run_id, "dir": str(run.path), "state": run.status()["state"],
                    "step": 6, "total_steps": 6, "config": tomllib.loads(run.config_path.read_text()),
                    "checkpoints": run.checkpoints(), "metrics": run.metrics() if metrics else [],
                    "events": run.events() if events else []}

        def call(self, cmd, *, timeout=None):
            if isinstance(cmd, api.ListRuns):
                return cmd.reply.from_json({"runs": [self.record(False, False)]})
            if isinstance(cmd, api.GetRun):
                return cmd.reply.from_json(self.record(cmd.metrics, cmd.events))
            return super().call(cmd, timeout=timeout)

        def stream(self, cmd):
            if isinstance(cmd, api.StreamRun):
                return iter([api.stream_item(k, d, cmd.items) for k, d in (("replayed", {}), ("end", {"state": "completed"}))])
            return super().stream(cmd)

    records = run.metrics()
    app = WorkbenchApp(RunFolderClient(), mode="train", run_id=run.run_id, remember=False)
    async with app.run_test(size=(120, 40)) as pilot:
        plot = app.screen.query_one("#plot-lr", PlotView)
        for _ in range(100):
            await pilot.pause(0.05)
            if plot.point_count() >= len(records):
                break
        train, *evals = plot.series
        assert plot.title == "reward accuracy" and train.label == "train"
        assert list(train.ys) == [m["reward_accuracy"] for m in records]
        assert [s.label for s in evals] == ["eval"]
        assert list(evals[0].ys) == [m["eval_reward_accuracy"] for m in records if "eval_reward_accuracy" in m]
        assert "reward accuracy" in str(plot.render())


CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Germany", "Berlin"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Kenya", "Nairobi"),
            ("Norway", "Oslo"), ("Greece", "Athens"), ("Russia", "Moscow"), ("China", "Beijing"),
            ("Peru", "Lima"), ("Cuba", "Havana"), ("Chile", "Santiago"), ("Poland", "Warsaw")]


DPO_270M_STEPS = 2


@pytest.mark.slow
def test_dpo_on_the_real_270m_raises_reward_accuracy_on_held_out_pairs(shared_real_load, tmp_path):
    """Short answers preferred over long ones: on pairs it never saw the tuned model's margin
    is positive (the base's is 0: it is its own reference) for most of them.

    ``DPO_270M_STEPS`` updates of LoRA on q and v (the example's "all" continues an SFT run's
    adapters; all seven targets on this model are the SFT test's, test_real_270m: here they
    took ~6 s of CPU more, for the same accuracy), 4 held-out pairs (2 eval batches). Measured
    (train.seed 0, 1, 2) so: held-out reward accuracy 1.0, 1.0, 1.0 (the assert asks 0.75),
    margin 7.8, 7.3, 7.2, eval loss < 1e-3 (log 2 = 0.69). With all targets: margin 17.0, 16.8,
    16.0 on these 4 pairs, 17.1, 17.1, 16.1 on 8; at 1 step (seeds 0, 1, 8 pairs) 12.0, 12.1;
    at 4 steps 24.4, 24.4, 23.2; at 8 steps (seed 0) 34.7 — accuracy 1.0 in every case. The
    trainer's own eval (metrics.jsonl's eval_*) is what is read: no eval hooks (eval.jsonl's
    rows and TensorBoard of a DPO run: ``dpo_run``'s tests), so the base is not scored first
    (policy and reference forwards: its loss is log 2 by construction)."""
    import os

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train.loop import run_training

    def rows(items):
        return [{"prompt": f"What is the capital of {c}?", "chosen": f"{city}.",
                 "rejected": f"That is a good question. The capital city of {c} is the city of {city}, "
                             "and I hope that this answer helps you."} for c, city in items]

    train = _write(tmp_path / "train.jsonl", rows(CAPITALS[:12]))
    held = _write(tmp_path / "eval.jsonl", rows(CAPITALS[12:]))
    config = os.path.join(os.path.dirname(__file__), "..", "examples", "dpo.toml")
    cfg = load_config(config, [f'data.path="{train}"', f'data.eval_path="{held}"', "data.max_length=48",
                               f"train.steps={DPO_270M_STEPS}", "train.batch_size=2", f"train.eval_every={DPO_270M_STEPS}",
                               "train.eval_batches=2", f"train.checkpoint_every={DPO_270M_STEPS}", "train.log_every=4", "train.learning_rate=1e-3",
                               'train.schedule="constant"', "train.warmup_steps=0", 'train.compute_dtype="float32"',
                               "train.beta=0.1", "train.sft_weight=0",  # plain DPO, whatever the example tunes
                               'lora.targets="q v"',
                               "mesh.devices=1", f'run.dir="{tmp_path}"'])
    result = run_training(cfg, runs.create_run(cfg))
    assert result.state == "completed", result
    last = runs.RunDir(result.run_dir).metrics()[-1]
    assert last["eval_reward_accuracy"] >= 0.75 and last["eval_reward_margin"] > 0, last
    assert last["eval_loss"] < np.log(2), last  # below the base's (margin 0: log 2)


def test_the_memory_estimate_shows_no_second_copy_of_the_base_for_the_reference(demo):
    from adapters_lib.memory import estimate as memory

    config = demo[0].config
    sft = memory.estimate(config, batch_size=4, seq_len=64)
    dpo = memory.estimate(config, batch_size=4, seq_len=64, objective="dpo")
    assert dpo.weights == sft.weights and dpo.reference == 0 and dpo.adapters == sft.adapters
    assert dpo.activations > sft.activations  # two rows a pair
    assert "the base with the adapters off (no second copy, 0 B)" in dpo.summary()
    other = memory.estimate(config, batch_size=4, seq_len=64, objective="dpo", reference="run:abc")
    assert other.reference == other.adapters > 0 and other.total == dpo.total + other.adapters
