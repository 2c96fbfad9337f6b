"""Evaluation during real demo runs: eval.jsonl rows for base and tuned,
the best checkpoint kept and the early stop, TensorBoard events read back with TensorBoard's
own reader, ``--step best``, and ``eval --run R --all-checkpoints``."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import records
from adapters_lib.evals.metrics import METRICS
from adapters_lib.evals.selection import best_step
from adapters_lib.runs import RunDir
from workbench.cli import main

# TensorBoard's reader on its TF-free file layer (as tests/test_tensorboard_log.py)
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _scalars(path, tag=None):
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    if tag is None:
        return acc
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_every_run_writes_eval_rows_and_tensorboard_events(trained_demo_run):
    """The session's 40-step demo run (evals at 20 and 40, default metrics)."""
    run = RunDir(trained_demo_run)
    rows = records.read_rows(run)
    assert [(r["step"], r["phase"]) for r in rows] == [(0, "base"), (20, "tuned"), (40, "tuned")]
    for r in rows:
        assert set(r) == {"step", "phase", "loss", "perplexity"}
        assert r["perplexity"] == pytest.approx(math.exp(r["loss"]))
    eval_loss = {m["step"]: m["eval_loss"] for m in run.metrics() if "eval_loss" in m}
    assert {r["step"]: r["loss"] for r in rows if r["phase"] == "tuned"} == pytest.approx(eval_loss)
    assert rows[0]["loss"] > rows[-1]["loss"]  # the base model scores worse than the tuned one

    acc = _scalars(run.path)
    metrics = run.metrics()
    loss = {e.step: e.value for e in acc.Scalars("loss")}
    assert loss == {m["step"]: pytest.approx(m["loss"], rel=1e-6) for m in metrics}
    for key in ("lr", "grad_norm", "eval_loss", "base/loss", "tuned/loss", "tuned/perplexity"):
        assert key in acc.Tags()["scalars"], key
    assert {e.step for e in acc.Scalars("tuned/loss")} == {20, 40}
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "[train]" in config and "steps = 40" in config

    status = run.status()
    assert status["trainable_params"] > 0 and status["wall_s"] > 0 and status["peak_bytes"] > 2**20


@pytest.fixture(scope="module")
def stopped_early(tmp_path_factory):
    """A run with every metric that stops early: no eval improves the loss by more than 100,
    so after the first tuned eval (the best) two more end it."""
    from fixtures_runs import train_demo

    run, result = train_demo(
        tmp_path_factory.mktemp("early"), "early", train__steps=30, train__eval_every=2,
        train__checkpoint_every=100, train__keep_checkpoints=1, train__best_metric='"loss"',
        train__early_stop_patience=2, train__early_stop_min_delta=100.0,
        train__eval_metrics=json.dumps(list(METRICS)), train__eval_examples=6,
        train__eval_max_new_tokens=4)
    return run, result


def test_eval_rows_hold_every_metric_for_base_and_tuned(stopped_early):
    run, _ = stopped_early
    rows = records.read_rows(run)
    assert [(r["step"], r["phase"]) for r in rows] == [(0, "base"), (2, "tuned"), (4, "tuned"),
                                                       (6, "tuned")]
    for r in rows:
        assert set(r) == {"step", "phase", *METRICS}, r
        for name in ("exact_match", "contains", "rouge_l", "numeric_match"):
            assert 0.0 <= r[name] <= 1.0
    tb = _scalars(run.path)
    for name in METRICS:
        assert _scalars(run.path, f"base/{name}") == {0: pytest.approx(rows[0][name])}
        assert set(tb.Tags()["scalars"]) >= {f"tuned/{name}"}


def test_early_stop_ends_completed_and_keeps_the_best_checkpoint(stopped_early):
    run, result = stopped_early
    assert result.state == "completed" and result.step == 6
    status = run.status()
    assert status["state"] == "completed"
    assert "stopped early by train.early_stop_patience at step 6" in status["message"]
    assert (status["best_metric"], status["best_step"]) == ("loss", 2)
    assert status["best_value"] == pytest.approx(records.read_rows(run, "tuned")[0]["loss"])
    # keep_checkpoints = 1 and no periodic checkpoint: the best (asked for at its eval) stays
    assert run.checkpoints() == [2, 6]
    assert best_step(run) == (2, "loss", pytest.approx(status["best_value"]))


def test_runs_show_names_the_best_checkpoint_and_the_run_facts(stopped_early):
    from adapters_lib.engine import api
    from workbench.commands.runs import render_run

    run, _ = stopped_early
    status = run.status()
    text = render_run(api.RunDetail.from_json({**status, "id": run.run_id, "dir": str(run.path),
                                               "checkpoints": run.checkpoints()}))
    assert f"  best         loss {status['best_value']:.4f} at step 2 (--step best)" in text
    assert f"{status['trainable_params']:,} trainable params" in text and "peak memory" in text


def test_step_best_loads_the_best_checkpoint(stopped_early, tmp_path, capsys):
    from adapters_lib import tuned

    run, _ = stopped_early
    assert tuned.load_run_model(run, -2).step == 2
    text = tmp_path / "some.txt"
    text.write_text("Is 12 even or odd? even\n\nIs 7 even or odd? odd\n")
    assert main(["eval", "--run", str(run.path), "--step", "best", "--data", str(text), "--json",
                 "--in-process"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 2
    with pytest.raises(SystemExit) as exited:  # argparse's one line, exit 2
        main(["export", str(run.path), "--step", "bst"])
    assert exited.value.code == 2
    assert "'bst' is not a step number or 'best'" in capsys.readouterr().err


def test_eval_all_checkpoints_scores_base_and_each_checkpoint(stopped_early, capsys):
    run, _ = stopped_early
    assert main(["eval", "--run", str(run.path), "--all-checkpoints", "--metric",
                 "loss,perplexity,numeric_match", "--json", "--in-process"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["phase"]) for r in table["rows"]] == [(0, "base"), (2, "tuned"), (6, "tuned")]
    assert table["metrics"] == ["loss", "perplexity", "numeric_match"] and table["metric"] == "loss"
    tuned = [r for r in table["rows"] if r["phase"] == "tuned"]
    assert table["best_step"] == min(tuned, key=lambda r: r["loss"])["step"]
    assert len({r["tokens"] for r in table["rows"]}) == 1  # the same eval split every time
    assert main(["eval", "--run", str(run.path), "--all-checkpoints", "--metric", "loss",
                 "--in-process"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith(f"run {run.run_id} on the run's eval split") and "2 checkpoints" in text[0]
    assert text[-1] == f"best by loss: step {table['best_step']}"


def test_a_generated_metric_on_text_data_fails_at_the_start_in_one_line(tmp_path):
    from fixtures_runs import train_demo

    data = tmp_path / "plain.txt"
    data.write_text("\n\n".join(f"Plain text paragraph number {i}, no answers here." for i in range(40)))
    with pytest.raises(WorkbenchError) as err:
        train_demo(tmp_path, "text", data__path=f'"{data}"', train__eval_metrics='["rouge_l"]',
                   train__steps=2)
    assert "need eval examples with an answer" in str(err.value)
    run = next(RunDir(p) for p in tmp_path.iterdir() if (p / "config.toml").is_file())
    assert run.state == "failed" and run.metrics() == []  # refused before the first step
