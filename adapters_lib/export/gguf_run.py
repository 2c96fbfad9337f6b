"""A gemma-route tuned model written as GGUF (``gguf`` / ``gguf-lora``) into an export folder.

- ``gguf``: ``<name>-<quant>.gguf`` (the merged weights) + ``Modelfile`` (``FROM`` it);
- ``gguf-lora``: ``<name>-lora-<quant>.gguf`` + ``Modelfile`` (``FROM`` the base,
  ``ADAPTER`` the file). The base is the run's own base GGUF when it was one (an Ollama
  model by its name, any other GGUF by its path); otherwise the base weights are written
  beside the adapter as ``base-<quant>.gguf`` so that llama.cpp and Ollama have one.

``base_gguf(source)`` finds the GGUF behind a ``[model] source`` (the starter, an Ollama or
LM Studio blob, a GGUF path) without loading anything.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.export import modelfile


def base_gguf(source: str) -> tuple[Path | None, str]:
    """(the base GGUF file, its Ollama model name or "") of a model source; (None, "")
    when the base is not a GGUF."""
    if not source or source == "demo":
        return None, ""
    from adapters_lib.catalog import find

    try:
        entry = find(source)
    except WorkbenchError:
        return None, ""
    if entry.format != "gguf":
        return None, ""
    if entry.source == "starter":
        from adapters_lib.models import starter

        path = starter.ensure_starter()
    else:
        path = Path(entry.path)
    name = entry.id.split(":", 1)[1] if entry.id.startswith("ollama:") else ""
    return path, name


def export_name(tuned: Any) -> str:
    """The file stem: the run's name, else its id, else "model"."""
    cfg = getattr(tuned, "cfg", None)
    name = getattr(getattr(cfg, "run", None), "name", "") or tuned.run_id or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip("-.") or "model"


def arch_of(loaded: Any) -> Any:
    from adapters_lib.models import families

    try:
        return families.arch_from_transformer_config(loaded.config, loaded.family)
    except families.ArchError as e:
        raise WorkbenchError(f"a {loaded.family} model cannot be written as GGUF by this build "
                             f"({e.reason})", where="--format gguf",
                             hint="export --format gemma or hf") from None


def write_gguf_export(stage: Path, final: Path, tuned: Any, fmt: str, quant: str,
                      trainable: Any, spec: Any) -> dict[str, Any]:
    """Fill ``stage`` (created here); returns the summary keys (paths as they will be in
    ``final``, where the folder is swapped to)."""
    from adapters_lib.export.gguf import write_gguf
    from adapters_lib.export.gguf_lora import write_gguf_lora
    from adapters_lib.export.merged import merged_params

    loaded = tuned.loaded
    arch = arch_of(loaded)
    stem = export_name(tuned)
    base_path, ollama_base = base_gguf(tuned.source)
    stage.mkdir(parents=True, exist_ok=True)
    what = f"{tuned.run_id or tuned.source} step {tuned.step}"
    title = f"{stem} (gemma-workbench fine-tune of {tuned.source})"
    written: list[dict[str, Any]] = []
    if fmt == "gguf":
        file = stage / f"{stem}-{quant}.gguf"
        params = merged_params(loaded, trainable, spec)
        written.append(write_gguf(file, params, arch, quant=quant, tokenizer=loaded.tokenizer_path,
                                  base_gguf=base_path, name=title, finetune=tuned.run_id,
                                  base_params=_float_params(loaded) if quant == "base" else None))
        modelfile.write_modelfile(stage, file, comment=f"gemma-workbench export of {what}: "
                                                       f"merged weights, {quant}")
    else:
        file = stage / f"{stem}-lora-{quant}.gguf"
        written.append(write_gguf_lora(file, trainable, spec, arch, quant=quant, name=title))
        model: str | Path
        if ollama_base:
            model = ollama_base
        elif base_path is not None:
            model = base_path
        else:
            model = stage / f"base-{quant}.gguf"
            written.append(write_gguf(model, _float_params(loaded), arch, quant=quant,
                                      tokenizer=loaded.tokenizer_path,
                                      name=f"{tuned.source} (base of {stem})"))
        modelfile.write_modelfile(stage, model, adapter=file,
                                  comment=f"gemma-workbench export of {what}: LoRA adapter, "
                                          f"{quant}, over {_shown(model)}\nOllama's newer releases refuse "
                                          "ADAPTER: for Ollama prefer --format gguf")
    for w in written:
        w["file"] = str(final / Path(w["file"]).name)
    return {"quant": quant, "files": written, "modelfile": str(final / modelfile.MODELFILE),
            "base_gguf": str(base_path) if base_path else "",
            "ollama_create": modelfile.create_command(stem, final)}


def _shown(model: str | Path) -> str:
    return f"{model.name} (written beside it)" if isinstance(model, Path) and \
        model.name.startswith("base-") else str(model)


def _float_params(loaded: Any) -> Any:
    """The base's float weights (a base held quantized, ``[model] quantize``, is read again)."""
    if getattr(loaded, "quantize", "none") == "none":
        return loaded.params
    from adapters_lib.export.merged import float_base

    return float_base(loaded).params
