"""Keras presets (``config.json`` + ``model.weights.h5`` or its shards + ``assets/tokenizer``).

A Gemma 2, 3, 3n or 4 preset is read by the gemma route (``models.hf.keras_weights``: its tensors
under Hugging Face names) and by the Keras route (``backend = "keras"``). ``ok`` means the gemma
route loads it: the architecture comes from the backbone config and
every weight the gemma modules need is in the file with the shape the config implies.
"""

from __future__ import annotations

from pathlib import Path

from adapters_lib.catalog.entry import ModelEntry, set_arch
from adapters_lib.catalog.orbax_meta import read_json
from adapters_lib.models import families
from adapters_lib.models.families import ArchError


def has_keras_weights(folder: Path) -> bool:
    return (folder / "model.weights.h5").is_file() or (folder / "model.weights.json").is_file()


def inspect_keras(entry: ModelEntry, folder: Path) -> None:
    from adapters_lib.models.hf import KerasPresetTensors, hf_config, preset_family

    tok = folder / "assets" / "tokenizer" / "vocabulary.spm"
    entry.tokenizer = str(tok) if tok.is_file() else None
    try:
        config = read_json(folder / "config.json", "config.json") \
            if (folder / "config.json").is_file() else {}
        cls = str(config.get("class_name", ""))
        body = config.get("config") or {}
        fam = preset_family(cls, body) if cls else "other"
        entry.family = fam
        meta = folder / "metadata.json"
        if meta.is_file():
            count = read_json(meta, "metadata.json").get("parameter_count")
            entry.params = int(count) if count else None
        if not cls:
            entry.fail("unreadable", "Keras preset without config.json")
            return
        if not has_keras_weights(folder):
            entry.fail("incomplete", "Keras preset without model.weights.h5")
            return
        if entry.tokenizer is None:
            entry.fail("incomplete", "Keras preset without assets/tokenizer/vocabulary.spm")
            return
        arch = families.from_hf_config(hf_config(cls, body))
        set_arch(entry, arch)
        entry.params = entry.params or arch.param_count()
        from adapters_lib.models.hf import check_hf_shapes

        try:
            with KerasPresetTensors(folder) as tensors:
                problem = check_hf_shapes(arch, tensors.shapes())
        except FileNotFoundError as e:
            raise ArchError(str(e), "incomplete", arch.family) from None
        if problem:
            raise ArchError(f"model.weights.h5: {problem}", "unsupported", arch.family)
    except ArchError as e:
        if e.family != "other":
            entry.family = e.family
        entry.fail(e.status, e.reason)
