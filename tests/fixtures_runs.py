"""Run fixtures: a short trained LoRA run on the demo, made once per test session.

``trained_demo_run`` → the ``Path`` of a completed run directory (config.toml, metrics.jsonl,
events.jsonl, status.json, checkpoints at steps 20 and 40) for the sample, export, engine and
TUI tests to reuse. One device, 40 steps, max_length 64: ~45 s on a busy 2-core machine
(most of it model load, adapter init and compile, which the first use in a session pays).
``demo_overrides()`` gives the same settings as ``--set`` strings, for tests that need a run
with the same data order and loss curve (the resume test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TRAINED_DEMO_STEPS = 40

DEMO_TEST_SETTINGS = {
    "mesh.devices": "1",
    "data.max_length": "64",
    "train.steps": str(TRAINED_DEMO_STEPS),
    "train.batch_size": "8",
    "train.learning_rate": "0.005",
    "train.warmup_steps": "5",
    "train.eval_every": "20",
    "train.eval_batches": "1",
    "train.eval_exact_match": "0",
    "train.checkpoint_every": "20",
    "train.log_every": "1",
}


def demo_overrides(**changes: object) -> list[str]:
    """The fixture's settings as ``--set`` items; ``changes`` use ``section__key`` names."""
    settings = dict(DEMO_TEST_SETTINGS)
    settings.update({k.replace("__", "."): str(v) for k, v in changes.items()})
    return [f"{k}={v}" for k, v in settings.items()]


def train_demo(root: Path, name: str, **changes: object):
    """Create and train a demo run under ``root``; returns (RunDir, TrainResult)."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    cfg = load_config(None, demo_overrides(run__name=f'"{name}"', run__dir=f'"{root}"', **changes))
    run = runs.create_run(cfg)
    return run, run_training(cfg, run, hooks=default_hooks)


@pytest.fixture(scope="session")
def trained_demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed 40-step LoRA run on the demo model (1 device); its run directory."""
    run, result = train_demo(tmp_path_factory.mktemp("trained-demo"), "fixture")
    assert result.state == "completed", result
    return run.path


class StopAt:
    """A TrainControl that asks to stop once ``step`` updates are done (and keeps what it saw)."""

    def __init__(self, step: int):
        self.step = step
        self.seen = 0
        self.metrics: list[dict] = []
        self.events: list[dict] = []

    def should_stop(self) -> bool:
        self.seen += 1
        return self.seen >= self.step

    def on_metrics(self, record: dict) -> None:
        self.metrics.append(record)

    def on_event(self, record: dict) -> None:
        self.events.append(record)

    def between_steps(self) -> None:
        pass
