"""Memory: what one train step needs per device, what a device holds, what would fit instead,
and what hardware this machine has.

- ``estimate`` — the per-device estimate of a train step, from a model config alone
  (``estimate.estimate``, ``estimate_run``, ``MemoryEstimate``, ``TERMS``; pure: no JAX);
- ``advice`` — a launch that does not fit, refused with the settings that do (``fit_problem``);
- ``device`` — accelerator memory by chip (``Chip``, ``CHIPS``, ``find_chip``), and what a
  device or the host has (``device_memory_bytes``, ``host_memory_bytes``);
- ``hardware`` — TPU device files and their holders, NVIDIA GPUs, the TPU environment, probed
  before JAX is imported (``probe_hardware``; ``doctor`` reads it).

Names are imported lazily, so ``doctor`` reads the hardware without the estimate's imports.
Inside ``adapters_lib`` and ``workbench`` code imports the modules. No name here is spelled
like a module of the package (``estimate`` is the module; its function is ``estimate.estimate``).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "estimate": ("DTYPE_BYTES", "FIT_FRACTION", "TERMS", "MemoryEstimate", "estimate_run", "fmt_bytes", "base_param_shapes", "ATTENTION_GLOBAL_BLOCK",
                 "KERNEL_CE_LANE", "kernel_ce_why_not", "ce_chunk_budget_for", "scored_keys"),
    "advice": ("alternatives", "fit_problem"),
    "device": ("GiB", "Chip", "CHIPS", "find_chip", "chip_for_device", "gpu_fraction",
               "device_memory_bytes", "host_memory_bytes"),
    "hardware": ("Hardware", "probe_hardware", "probe_tpu_files", "probe_tpu_holders",
                 "probe_nvidia", "LIBTPU_LOCKFILE"),
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
