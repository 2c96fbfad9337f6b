"""LoRA: adapters on a gemma model's chosen einsums and expert banks, their shapes, their
fusion into the base weights, and the compiled program's family.

- ``targeted`` — targeted LoRA through ``gemma.peft``: ``LoRAModel``, ``wrap``, ``init_lora``,
  ``split_lora``/``merge_lora``, ``adapter_shapes``, ``count_params``; JAX;
- ``experts`` — LoRA on a MoE expert bank (Gemma 4's ``experts`` target); JAX;
- ``fuse`` — adapters folded into the base weights and listed in PEFT terms (numpy only);
- ``family`` — one compiled program for a family of LoRA configs (rank bucket, masks);
- ``shapes`` — the adapters' shapes and count from a model config (arithmetic only).

Names are imported lazily (``from adapters_lib.lora import wrap`` imports JAX, ``from
adapters_lib.lora import lora_param_count`` does not): the TUI's LoRA form counts parameters
without JAX. Inside ``adapters_lib`` and ``workbench`` code imports the modules
(``from adapters_lib.lora import shapes``), so the import contracts see what it uses.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "targeted": ("LoRAModel", "TargetedLoRAEinsum", "wrap", "init_lora", "init_adapters",
                 "split_lora", "merge_lora", "adapter_shapes", "count_params",
                 "expected_lora_params", "kv_shared_layers", "lora_in_out", "SLOT_MAJOR"),
    "experts": ("EXPERTS_PREFIX", "experts_param_count"),
    "fuse": ("LORA_PREFIX", "EXPERTS_KEY", "AdapterTensor", "fuse_lora", "fuse_experts",
             "iter_adapters"),
    "family": ("LoraFamily", "rank_bucket", "wants_family", "family_targets", "run_family",
               "apply_runtime"),
    "shapes": ("lora_param_shapes", "lora_param_count"),
}
_WHERE = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = list(_WHERE)
