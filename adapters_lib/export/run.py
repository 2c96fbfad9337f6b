"""Export a run's checkpoint, or any gemma-route ``TunedModel``, in one of ``formats.FORMATS``.

The export is staged beside its target and swapped into place (``export.target``): a
non-empty ``out`` is refused unless ``force`` is given and it is an earlier export of this
tool; the run's own default folder (``<run>/adapter``...) is replaced without ``force`` when
it holds an earlier export. The target is checked before any weights are loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.export import formats
from adapters_lib.export.target import resolve_target, write_export

log = logging.getLogger(__name__)


def default_out(run_path: Path, fmt: str) -> Path:
    return Path(run_path) / formats.DEFAULT_FOLDERS[fmt]


def check_format(cfg: Any, fmt: str, run_id: str = "") -> None:
    """Refuse a format the run cannot give, before anything is loaded."""
    name = f"run {run_id}" if run_id else "this run"
    if cfg.model.backend == "keras" and fmt != "adapter":
        raise WorkbenchError(f"{name} is a Keras run: it exports its adapter only (keras-hub format)",
                             where=f"--format {fmt}", hint="export --format adapter")
    if fmt == "adapter" and not cfg.lora.enabled:
        raise WorkbenchError(f"{name} is a full fine-tune: it has no adapter",
                             where="--format adapter", hint="export --format gemma or hf")


def export_run(run: Any, fmt: str = "adapter", *, step: int | None = None,
               out: str | Path | None = None, force: bool = False) -> dict[str, Any]:
    """Export a run's checkpoint (latest when ``step`` is None); returns a summary
    ``{run_id, step, format, out}``. ``run``: an id, a prefix, a run directory or a ``RunDir``."""
    from adapters_lib import runs
    from adapters_lib.tuned import load_run_model

    fmt = formats.resolve(fmt)
    run_dir = run if isinstance(run, runs.RunDir) else runs.find_run(str(run))
    check_format(run_dir.config(), fmt, run_dir.run_id)
    resolve_target(out or default_out(run_dir.path, fmt), force=force, owned=not out)
    return load_run_model(run_dir, step).export(fmt, out, force=force)


def export_gemma(tuned: Any, fmt: str, out: str | Path | None = None, *,
                 force: bool = False) -> dict[str, Any]:
    """Write a gemma-route ``TunedModel`` (``tuned.gemma.GemmaTuned``) as ``fmt``."""
    from adapters_lib.export.merged import copy_tokenizer, merged_params, save_gemma, save_hf
    from adapters_lib.export.peft import save_adapter

    fmt = formats.resolve(fmt)
    if not tuned.has_tuned:
        raise WorkbenchError("a base model has nothing to export", where="export")
    if fmt == "adapter" and tuned.adapters is None:
        raise WorkbenchError(f"run {tuned.run_id or '?'} is a full fine-tune: it has no adapter",
                             where="--format adapter", hint="export --format gemma or hf")
    if out is None and tuned.run_path is None:
        raise WorkbenchError("an export needs --out (this model is not a run)", where="--out")
    owned = not out
    target = resolve_target(out or default_out(tuned.run_path, fmt), force=force, owned=owned)
    loaded = tuned.loaded
    spec = tuned.lora if tuned.adapters is not None else _full_spec()
    trainable = tuned.adapters if tuned.adapters is not None else tuned.tuned_params

    def write(stage: Path) -> None:
        if fmt == "adapter":
            save_adapter(stage, trainable, spec, tuned.source,
                         extra={"run_id": tuned.run_id, "step": tuned.step})
        else:
            params = merged_params(loaded, trainable, spec)
            if fmt == "gemma":
                save_gemma(stage, params)
            else:
                save_hf(stage, params, loaded)
        if fmt != "gemma":
            copy_tokenizer(loaded, stage)

    info = {"format": fmt, "run_id": tuned.run_id, "step": tuned.step, "base_model": tuned.source}
    write_export(target, write, info, force=force, owned=owned)
    log.info("exported %s step %s as %s to %s", tuned.run_id or tuned.source, tuned.step, fmt, target)
    return {"run_id": tuned.run_id, "step": tuned.step, "format": fmt, "out": str(target)}


def _full_spec() -> Any:
    from adapters_lib.config import LoraSpec

    return LoraSpec(enabled=False)


def export_adapter(run: Any, *, step: int | None = None, out: str | Path | None = None,
                   format: str = "adapter", force: bool = False) -> dict[str, Any]:  # noqa: A002
    """The adapter of a run (``format`` is accepted for symmetry; only "adapter")."""
    return export_run(run, format or "adapter", step=step, out=out, force=force)


def export_merged(run: Any, *, step: int | None = None, out: str | Path | None = None,
                  format: str = "gemma", force: bool = False) -> dict[str, Any]:  # noqa: A002
    """Merged full weights of a run: ``format`` "gemma" (orbax) or "hf" (safetensors)."""
    if format not in ("gemma", "hf", ""):
        raise WorkbenchError(f"merged export format {format!r}", where="--format", hint="use gemma or hf")
    return export_run(run, format or "gemma", step=step, out=out, force=force)
