"""Exact resume, stop and divergence: what a stopped or failed run keeps.

One run of the fixture's settings is stopped at step 13 (between periodic checkpoints, so the
stop writes its own), resumed, interrupted by Ctrl-C at 27, resumed again: its per-step
losses must equal the uninterrupted fixture run's. A copy of the stopped run, resumed with a learning rate that blows up, must fail
with a clear event and keep the step-13 checkpoint, even when it keeps a single checkpoint.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from fixtures_runs import TRAINED_DEMO_STEPS, StopAt, demo_overrides

from adapters_lib.runs import RunDir

STOP_AT = 13


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A fixture-settings run stopped at step 13, and a pristine copy of it."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    root = tmp_path_factory.mktemp("resume")
    cfg = load_config(None, demo_overrides(run__dir=f'"{root}"', run__name="resume"))
    run = runs.create_run(cfg)
    control = StopAt(STOP_AT)
    result = run_training(cfg, run, control=control, hooks=default_hooks)
    copy = RunDir(root / "copy")
    shutil.copytree(run.path, copy.path)
    return cfg, run, copy, result, control


def test_stop_request_checkpoints_and_marks_the_run_stopped(stopped_run):
    _, run, _, result, control = stopped_run
    assert result.state == "stopped" and result.step == STOP_AT
    assert run.status()["state"] == "stopped" and run.status()["step"] == STOP_AT
    assert RunDir(run.path).checkpoints() == [STOP_AT]
    states = [e["state"] for e in run.events() if e["kind"] == "state"]
    assert states[-2:] == ["stopping", "stopped"]
    assert [m["step"] for m in run.metrics()] == list(range(1, STOP_AT + 1))
    assert [m["step"] for m in control.metrics] == list(range(1, STOP_AT + 1))  # streamed too


class InterruptAt(StopAt):
    """A foreground Ctrl-C after ``step`` updates (KeyboardInterrupt between steps)."""

    def should_stop(self) -> bool:
        return False

    def between_steps(self) -> None:
        self.seen += 1
        if self.seen >= self.step:
            raise KeyboardInterrupt


def test_resume_reproduces_the_uninterrupted_losses(stopped_run, trained_demo_run):
    """Stopped at 13 (stop request), resumed, Ctrl-C at 27, resumed to the end: same curve."""
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    cfg, run, _, _, _ = stopped_run
    interrupted = run_training(cfg, run, resume=True, control=InterruptAt(27 - STOP_AT), hooks=default_hooks)
    assert interrupted.state == "stopped" and interrupted.step == 27
    assert run.status()["state"] == "stopped" and "keyboard" in run.status()["message"]
    assert RunDir(run.path).checkpoints()[-1] == 27

    result = run_training(cfg, run, resume=True, hooks=default_hooks)
    assert result.state == "completed" and result.step == TRAINED_DEMO_STEPS
    resumed = {m["step"]: m["loss"] for m in run.metrics()}
    straight = {m["step"]: m["loss"] for m in RunDir(trained_demo_run).metrics()}
    assert sorted(resumed) == sorted(straight) == list(range(1, TRAINED_DEMO_STEPS + 1))
    for step in straight:
        assert resumed[step] == pytest.approx(straight[step], rel=1e-6, abs=0), step
    assert [e["step"] for e in run.events() if e["kind"] == "resumed"] == [STOP_AT, 27]


def test_divergence_fails_the_run_and_keeps_the_last_good_checkpoint(stopped_run):
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training
    from adapters_lib.train.session import TrainingDiverged

    cfg, _, copy, _, _ = stopped_run
    # one checkpoint right after the first blown-up update, to be thrown away; keeping a single
    # checkpoint must not let that save push out the last good one
    bad = cfg.replace(train=dataclasses.replace(cfg.train, learning_rate=1e30, checkpoint_every=STOP_AT + 1,
                                                schedule="constant", keep_checkpoints=1))
    with pytest.raises(TrainingDiverged) as err:
        run_training(bad, copy, resume=True, hooks=default_hooks)
    text = str(err.value)
    assert "loss became" in text and "lower train.learning_rate (now 1e+30)" in text
    assert "\n" not in text
    status = copy.status()
    assert status["state"] == "failed" and status["last_good_checkpoint"] == STOP_AT
    assert RunDir(copy.path).checkpoints() == [STOP_AT]
    failed = [e for e in copy.events() if e["kind"] == "state" and e["state"] == "failed"]
    assert failed and failed[-1]["message"] == text
    # every metrics line written is finite; the bad step is in the event, not the curve
    assert all(m["loss"] == m["loss"] and abs(m["loss"]) != float("inf") for m in copy.metrics())
