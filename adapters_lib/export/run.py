"""Export a gemma-route ``TunedModel`` in one of ``formats.FORMATS`` (a run's checkpoint:
``tuned.export_run``, which loads it first).

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
    if formats.KINDS[fmt] == "adapter" and not cfg.lora.enabled:
        raise WorkbenchError(f"{name} is a full fine-tune: it has no adapter",
                             where=f"--format {fmt}", hint="export --format gemma, hf or gguf")


def export_gemma(tuned: Any, fmt: str, out: str | Path | None = None, *,
                 force: bool = False, quant: str = "") -> dict[str, Any]:
    """Write a gemma-route ``TunedModel`` (``tuned.gemma.GemmaTuned``) as ``fmt``."""
    from adapters_lib.export.merged import copy_tokenizer, merged_params, save_gemma, save_hf
    from adapters_lib.export.peft import save_adapter
    from adapters_lib.export.provenance import base_record, write_provenance

    fmt = formats.resolve(fmt)
    quant = formats.check_quant(fmt, quant)
    if not tuned.has_tuned:
        raise WorkbenchError("a base model has nothing to export", where="export")
    if formats.KINDS[fmt] == "adapter" and tuned.adapters is None:
        raise WorkbenchError(f"run {tuned.run_id or '?'} is a full fine-tune: it has no adapter",
                             where=f"--format {fmt}", hint="export --format gemma, hf or gguf")
    if out is None and tuned.run_path is None:
        raise WorkbenchError("an export needs --out (this model is not a run)", where="--out")
    owned = not out
    target = resolve_target(out or default_out(tuned.run_path, fmt), force=force, owned=owned)
    loaded = tuned.loaded
    spec = tuned.lora if tuned.adapters is not None else _full_spec()
    trainable = tuned.adapters if tuned.adapters is not None else tuned.tuned_params

    base = base_record(tuned.source, getattr(loaded, "quantize", "none"))
    info: dict[str, Any] = {"format": fmt, "run_id": tuned.run_id, "step": tuned.step,
                            "base_model": tuned.source}
    gguf: dict[str, Any] = {}

    def write(stage: Path) -> None:
        if fmt in formats.GGUF_FORMATS:
            from adapters_lib.export.gguf_run import write_gguf_export

            gguf.update(write_gguf_export(stage, target, tuned, fmt, quant, trainable, spec))
            info.update(quant=quant)
            write_provenance(stage, base)
            return
        if fmt == "adapter":
            save_adapter(stage, trainable, spec, tuned.source,
                         extra={"run_id": tuned.run_id, "step": tuned.step},
                         multimodal=bool(getattr(loaded, "towers", ())))
        else:
            params = merged_params(loaded, trainable, spec)
            if fmt == "gemma":
                save_gemma(stage, params)
            else:
                save_hf(stage, params, loaded)
        copy_tokenizer(loaded, stage)  # beside the weights: the folder loads as a model
        write_provenance(stage, base)

    write_export(target, write, info, force=force, owned=owned)
    log.info("exported %s step %s as %s to %s", tuned.run_id or tuned.source, tuned.step, fmt, target)
    return {"run_id": tuned.run_id, "step": tuned.step, "format": fmt, "out": str(target), **gguf}


def _full_spec() -> Any:
    from adapters_lib.config import LoraSpec

    return LoraSpec(enabled=False)
