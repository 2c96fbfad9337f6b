"""The one tuned-model path: ``TunedModel`` serves sample, compare, multi-turn A/B, eval and
export, for both routes.

- ``load_run_model(run, step)`` — a run's checkpoint (gemma or Keras, by its config);
- ``load_adapter_model(dir, model)`` — a base model plus an exported adapter folder;
- ``load_base_model(source)`` — a bare base model (the base side only);
- ``load_checkpoint(run, step)`` — the gemma route's ``(cfg, loaded, trainable, step)``;
- ``export_run(run, fmt, step=, out=, force=, quant=)`` — a run's checkpoint exported (``export.FORMATS``).

``base`` holds the interface and everything built on ``stream``; ``gemma`` and ``keras``
the two implementations. Importing this package is cheap (no JAX until a model loads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters_lib.tuned.base import (
    GENERATION_DTYPES,
    SIDES,
    Answer,
    TunedModel,
    generation_dtype_of,
)
from adapters_lib.tuned.checkpoint import load_checkpoint


def load_run_model(run: Any, step: int | None = None, *, quantize: str = "",
                   generation_dtype: str = "", generating: bool = False) -> TunedModel:
    """The tuned model of a run's checkpoint (latest when ``step`` is None or -1; the best
    when ``evals.selection.BEST_STEP``).

    ``run``: a ``RunDir``, or an id, a unique prefix or a run directory. ``quantize`` (not
    ""): the base held that way instead of the run's ``[model] quantize`` (gemma route).
    ``generation_dtype`` (not ""): a generation copy of the base in that dtype; with
    ``generating`` (sample, compare), "" means the run's ``[model] generation_dtype``
    (``generation_dtype_of``). Export and evaluation read the model as trained.
    """
    from adapters_lib import runs
    from adapters_lib.evals.selection import resolve_step

    run_dir = run if isinstance(run, runs.RunDir) else runs.find_run(str(run))
    step = resolve_step(run_dir, step)  # -2: the run's best checkpoint
    generation_dtype = generation_dtype_of(generation_dtype, run_dir.config() if generating else None)
    if run_dir.config().model.backend == "keras":
        from adapters_lib.tuned.keras import KerasTunedModel

        refuse_quantize_on_keras(quantize, generation_dtype)
        return KerasTunedModel.from_run(run_dir, None if step is None or step < 0 else step)
    from adapters_lib.tuned.gemma import GemmaTuned

    return GemmaTuned.from_run(run_dir, step, quantize=quantize, generation_dtype=generation_dtype)


def load_adapter_model(directory: str | Path, model: str = "", *, quantize: str = "",
                       generation_dtype: str = "") -> TunedModel:
    from adapters_lib.tuned.gemma import GemmaTuned

    return GemmaTuned.from_adapter_dir(directory, model, quantize=quantize,
                                       generation_dtype=generation_dtype)


def load_base_model(source: str = "demo", *, quantize: str = "", generation_dtype: str = "") -> TunedModel:
    from adapters_lib.tuned.gemma import GemmaTuned

    return GemmaTuned.base_model(source, quantize=quantize, generation_dtype=generation_dtype)


def refuse_quantize_on_keras(quantize: str, generation_dtype: str = "") -> None:
    from adapters_lib.errors import WorkbenchError

    if quantize and quantize != "none":
        raise WorkbenchError(f"--quantize {quantize}: a Keras-route run holds its base as its own "
                             "[model] quantize says", where="--quantize",
                             hint='drop --quantize (train with [model] quantize = "int8" for an int8 base)')
    if generation_dtype:
        raise WorkbenchError(f"--generation-dtype {generation_dtype}: gemma-route only",
                             where="--generation-dtype", hint="drop it for a Keras-route run "
                             "(it generates in its run's dtype)")


def export_run(run: Any, fmt: str = "adapter", *, step: int | None = None,
               out: str | Path | None = None, force: bool = False,
               quant: str = "") -> dict[str, Any]:
    """Export a run's checkpoint (latest when ``step`` is None); returns a summary
    ``{run_id, step, format, out}`` (the GGUF formats add ``quant``, ``files``,
    ``modelfile``, ``ollama_create``; ``quant``: their type, ``export.formats.check_quant``). ``run``: an id, a prefix, a run directory or a ``RunDir``.
    The format and the target are checked before any weights are loaded."""
    from adapters_lib import runs
    from adapters_lib.export import formats
    from adapters_lib.export.run import check_format, default_out
    from adapters_lib.export.target import resolve_target

    fmt = formats.resolve(fmt)
    quant = formats.check_quant(fmt, quant)
    run_dir = run if isinstance(run, runs.RunDir) else runs.find_run(str(run))
    check_format(run_dir.config(), fmt, run_dir.run_id)
    resolve_target(out or default_out(run_dir.path, fmt), force=force, owned=not out)
    return load_run_model(run_dir, step).export(fmt, out, force=force, quant=quant)


__all__ = ["GENERATION_DTYPES", "SIDES", "Answer", "TunedModel", "export_run", "generation_dtype_of",
           "load_adapter_model", "load_base_model", "load_checkpoint", "load_run_model"]
