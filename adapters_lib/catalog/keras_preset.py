"""Keras presets (``config.json`` + ``model.weights.h5`` + ``assets/tokenizer``): listed here,
loaded by the Keras route."""

from __future__ import annotations

from pathlib import Path

from adapters_lib.catalog.entry import ModelEntry
from adapters_lib.catalog.orbax_meta import read_json
from adapters_lib.models import families
from adapters_lib.models.families import ArchError

_KERAS_FAMILY = {"Gemma3Backbone": "gemma3", "Gemma4Backbone": "gemma4"}


def inspect_keras(entry: ModelEntry, folder: Path) -> None:
    tok = folder / "assets" / "tokenizer" / "vocabulary.spm"
    entry.tokenizer = str(tok) if tok.is_file() else None
    try:
        config = read_json(folder / "config.json", "config.json") \
            if (folder / "config.json").is_file() else {}
        cls = str(config.get("class_name", ""))
        body = config.get("config") or {}
        if cls == "GemmaBackbone":
            entry.family = "gemma2" if body.get("use_post_ffw_norm") else "other"
        elif cls in _KERAS_FAMILY:
            entry.family = _KERAS_FAMILY[cls]
        elif cls:
            entry.family = "other"
            entry.fail("unsupported", f"Keras preset of {cls}, not a Gemma backbone")
        meta = folder / "metadata.json"
        if meta.is_file():
            count = read_json(meta, "metadata.json").get("parameter_count")
            entry.params = int(count) if count else None
        if entry.family in ("gemma2", "gemma3") and body:
            f = int(body.get("intermediate_dim", 0))
            f = f // 2 if cls == "GemmaBackbone" else f
            dims = (body.get("num_layers"), body.get("hidden_dim"), f, body.get("num_query_heads"),
                    body.get("head_dim"), body.get("num_key_value_heads"))
            for (fam, size), (_, known) in families.KNOWN.items():
                if fam == entry.family and known.dims() == dims and size != "custom":
                    entry.size = size
        if not cls:
            entry.fail("unreadable", "Keras preset without config.json")
        elif not (folder / "model.weights.h5").is_file():
            entry.fail("incomplete", "Keras preset without model.weights.h5")
        elif entry.tokenizer is None:
            entry.fail("incomplete", "Keras preset without assets/tokenizer/vocabulary.spm")
        elif entry.family == "gemma4":  # `ok` only for what loads: neither route reads it yet
            entry.fail("unsupported", "a Keras Gemma 4 preset: this build loads Gemma 4 from HF "
                       "safetensors (gemma route) and Keras presets of Gemma 2/3 only")
    except ArchError as e:
        entry.fail(e.status, e.reason)
