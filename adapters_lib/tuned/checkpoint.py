"""A gemma-route run's checkpoint: the config, the base model and the trained tree (loading a
model is not the run directory's business: ``runs`` never imports this)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError


def checkpoint_step(run: Any, step: int | None) -> int:
    """``step`` if the run has that complete checkpoint, the latest one when None."""
    steps = run.checkpoints()  # the one checkpoint rule (runs.checkpoints)
    if not steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint yet", where=str(run.checkpoints_dir),
                             hint="wait for the first checkpoint (train.checkpoint_every) or resume it")
    if step is None or step < 0:
        return steps[-1]
    if step not in steps:
        raise WorkbenchError(f"run {run.run_id} has no checkpoint at step {step}",
                             hint=f"checkpoints: {', '.join(map(str, steps))}")
    return step


def load_checkpoint(run_dir: Any, step: int | None = None, *, quantize: str = "",
                    generation_dtype: str = "", host: bool = False) -> tuple[Any, Any, Any, int]:
    """``(cfg, LoadedModel, trainable, step)`` of a run's checkpoint (latest when ``step`` is None).

    ``trainable`` is the adapter tree for a LoRA run (merge it with ``loaded.params`` through
    ``lora.merge_lora`` and apply with ``lora.wrap(loaded.model, cfg.lora)``); for a full
    fine-tune (``cfg.lora.enabled = false``) it is the whole tuned params tree. The base is
    held as the run's ``[model] quantize``, or as ``quantize`` when given (not ""); a
    generation copy in ``generation_dtype`` when given (``models.loader.load_model``).
    ``host``: a final checkpoint this process kept in memory (``checkpoints.remember_saved``)
    comes back as that host tree, not placed (numpy: ``GemmaTuned`` folds it and places it once).
    The phases are marked for ``tuned.phases`` (config, base, adapters).
    """
    from adapters_lib import runs
    from adapters_lib.models.loader import load_model
    from adapters_lib.train import checkpoints
    from adapters_lib.tuned.phases import mark

    run = run_dir if isinstance(run_dir, runs.RunDir) else runs.RunDir(Path(run_dir))
    if not run.exists():
        raise WorkbenchError(f"{run.path} is not a run directory (no config.toml)",
                             hint="pass a directory made by `gemma-workbench train`")
    cfg = run.config()
    step = checkpoint_step(run, step)
    mark("config")
    spec = cfg.model_spec() if not quantize else dataclasses.replace(cfg.model_spec(), quantize=quantize)
    loaded = load_model(spec, param_dtype=cfg.train.param_dtype, generation_dtype=generation_dtype)
    plain = loaded
    if generation_dtype and not cfg.lora.enabled:  # the checkpoint holds the model's own layout
        import jax

        from adapters_lib.models import decode_layout

        plain = dataclasses.replace(loaded, params=jax.eval_shape(decode_layout.standard, loaded.params))
    mark("base")
    abstract = checkpoints.abstract_trainable(plain, cfg)
    trainable = checkpoints.restore_params(run.checkpoints_dir, step, abstract, host=host)
    mark("adapters")
    return cfg, loaded, trainable, step
