"""Device jobs on a run's checkpoint: export and eval (loss / perplexity on a data file).

Each request is checked first in the request thread (``check_export``, the checks at the top
of ``eval_job``: every mistake a 4xx before the device thread is asked); the tuned model comes
through ``sampling.tuned_model`` (its cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters_lib.engine import sampling
from adapters_lib.engine.errors import EngineError

# --------------------------------------------------------------------------- export


def check_export(engine: Any, cmd: Any) -> tuple[Any, str]:
    """(run, format) of an export request, or a 4xx before the device thread is asked."""
    from adapters_lib.export import formats
    from adapters_lib.export.run import check_format, default_out
    from adapters_lib.export.target import resolve_target

    run = sampling.run_dir_of(engine, cmd.run_id)
    fmt = formats.resolve(cmd.format, cmd.kind, where="export request: format")
    formats.check_quant(fmt, cmd.quant, where="export request: quant")
    if cmd.out and not Path(cmd.out).expanduser().is_absolute():
        raise EngineError(f"out {cmd.out!r} is a relative path", where="export request: out", status=400,
                          hint="send an absolute folder (the engine's working directory is not yours)")
    check_format(run.config(), fmt, run.run_id)
    resolve_target(cmd.out or default_out(run.path, fmt), force=cmd.force, owned=not cmd.out,
                   where="export request: out")  # refuse before loading anything
    return run, fmt


def export_job(engine: Any, cmd: Any, run: Any, fmt: str) -> dict[str, Any]:
    """Export a run's checkpoint in the one vocabulary (``export.formats``)."""
    from adapters_lib.export import formats

    model = sampling.tuned_model(run, cmd.step)
    result = model.export(fmt, cmd.out or None, force=cmd.force, quant=cmd.quant)
    return {"run_id": run.run_id, "kind": formats.KINDS[fmt], "format": fmt, "out": result["out"],
            "step": result["step"], "result": result}


# --------------------------------------------------------------------------- eval


def eval_job(engine: Any, cmd: Any) -> dict[str, Any]:
    """``eval`` in the engine: the evaluation area's computation (``adapters_lib.evals.perplexity``)."""
    from adapters_lib.evals import perplexity

    where = "eval request"
    if not cmd.data or not Path(cmd.data).is_absolute():
        raise EngineError(f"data {cmd.data!r} is not an absolute path", where=f"{where}: data",
                          hint="send an absolute file or folder (the engine's working directory is not yours)")
    if cmd.batch_size < 1 or cmd.max_length < 0:
        raise EngineError("batch_size must be positive and max_length not negative", where=where)
    sampling.check_quantize(cmd.quantize, f"{where}: quantize")
    run = sampling.run_dir_of(engine, cmd.run_id) if cmd.run_id else None
    step = cmd.step
    if run is not None:
        from adapters_lib.evals.selection import resolve_step

        step = resolve_step(run, step)  # -2: the run's best checkpoint
    future = engine.on_device(lambda: perplexity.evaluate(
        model=cmd.model, run=str(run.path) if run is not None else "",
        step=None if step < 0 else step, data=cmd.data, fmt=cmd.format,
        max_length=cmd.max_length or None, loss_on=cmd.loss_on, batch_size=cmd.batch_size,
        quantize=cmd.quantize),
        label="eval")
    result = future.result().to_json()
    if run is not None:
        result["run"] = run.run_id
    return result
