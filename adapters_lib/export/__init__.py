"""Export a run's tuned weights: the adapter (PEFT layout), or merged full weights (gemma, HF).

- ``formats`` — the one export vocabulary (``adapter|gemma|hf``; the API's older ``kind``);
- ``peft`` — the adapter in HF PEFT's layout (write, read back, check against a model);
- ``merged`` — base + adapters fused: gemma orbax checkpoint, HF safetensors;
- ``gguf`` / ``gguf_lora`` / ``gguf_meta`` / ``modelfile`` / ``gguf_run`` — the merged model
  and the adapter as GGUF for llama.cpp, Ollama and LM Studio, their metadata (llama.cpp's
  Gemma converter's keys), the Ollama ``Modelfile``;
- ``target`` — where an export lands: staged beside ``--out`` and swapped in, never
  deleting what the user made;
- ``run`` — ``export_gemma`` (any gemma-route ``TunedModel``; a run's checkpoint is
  ``tuned.export_run``, the Keras route's adapter ``keras_route.export``).

Names are imported lazily (``from adapters_lib.export import merged_params`` works), so that
``formats`` and ``target`` stay importable without numpy or JAX (the engine API uses
``formats``; the import-linter contract "api-is-light" keeps it so).
"""

from __future__ import annotations

import importlib
from typing import Any

from adapters_lib.export.formats import FORMATS

_NAMES = {
    "peft": ("ADAPTER_WEIGHTS", "ADAPTER_CONFIG", "PEFT_MODULES", "PEFT_PREFIX", "peft_name",
             "adapter_tensors", "adapter_config", "save_adapter", "read_adapter_config",
             "expected_lora", "load_adapter"),
    "merged": ("HF_SHARD_BYTES", "merged_params", "save_gemma", "save_hf", "copy_tokenizer"),
    "gguf": ("write_gguf", "gguf_tensors"),
    "gguf_lora": ("write_gguf_lora", "lora_tensors", "lora_name"),
    "modelfile": ("write_modelfile", "modelfile_text", "create_command", "ollama_name"),
    "run": ("default_out", "export_gemma", "check_format"),
}
_WHERE = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["FORMATS", *_WHERE]
