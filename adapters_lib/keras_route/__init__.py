"""The Keras route (``[model] backend = "keras"``): keras-hub Gemma + ``enable_lora`` + a
``keras.distribution`` made from ``[mesh]``, writing the same run directory as the gemma route.

Importing this package is cheap (no keras): ``run_keras_training`` sets ``KERAS_BACKEND=jax``
before its first keras import. In a process that imports keras elsewhere, set
``KERAS_BACKEND=jax`` before that import.

- ``run_keras_training(cfg, run_dir, *, control=None, resume=False)`` — like ``train.loop.run_training``;
- ``load_keras_tuned(run_dir, step=None)`` — the tuned model, ``.answers(prompts, tuned=True|False)``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_keras_tuned", "run_keras_training"]


def run_keras_training(cfg: Any, run_dir: Any, *, control: Any = None, resume: bool = False,
                       hooks: Any = ()) -> Any:
    from adapters_lib.keras_route.train import run_keras_training as run

    return run(cfg, run_dir, control=control, resume=resume, hooks=hooks)


def load_keras_tuned(run_dir: Any, step: int | None = None) -> Any:
    from adapters_lib.keras_route.generate import load_keras_tuned as load

    return load(run_dir, step)
