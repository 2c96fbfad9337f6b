"""A finished Keras-route demo run (8 simulated devices, ModelParallel 2×4), made once per session."""

from __future__ import annotations

import pytest

KERAS_DEMO = {
    "model": {"backend": "keras"},
    "data": {"max_length": 48},
    "mesh": {"data": 2, "tensor": 4},
    "lora": {"rank": 8, "alpha": 16},
    "train": {"steps": 30, "batch_size": 8, "learning_rate": 3e-3, "warmup_steps": 3,
              "eval_every": 10, "checkpoint_every": 20, "eval_batches": 2, "eval_exact_match": 6},
    "run": {"name": "keras-demo"},
}


@pytest.fixture(scope="session")
def keras_demo_run(tmp_path_factory: pytest.TempPathFactory):
    """(RunDir, TrainResult) of a 30-step Keras demo run with ModelParallel on a 2×4 mesh."""
    from adapters_lib import runs
    from adapters_lib.config import config_from_dict
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.keras_route import run_keras_training

    cfg = config_from_dict(KERAS_DEMO)
    run = runs.create_run(cfg, root=tmp_path_factory.mktemp("keras-runs"))
    result = run_keras_training(cfg, run, hooks=default_hooks)
    return run, result
