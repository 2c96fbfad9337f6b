"""Memory: what one train step needs per device, what a device holds, what would fit instead,
and what hardware this machine has.

- ``estimate`` — the per-device estimate of a train step, from a model config alone
  (``estimate.estimate``, ``MemoryEstimate``, ``TERMS``; pure: no JAX);
- ``run_estimate`` — a run config's estimate, in the LoRA family it trains in (``estimate_run``,
  ``run_program``, ``FITS``);
- ``advice`` — a launch that does not fit, refused with the settings that do (``fit_problem``);
- ``device`` — accelerator memory by chip (``Chip``, ``CHIPS``, ``find_chip``), and what a
  device or the host has (``device_memory_bytes``, ``host_memory_bytes``);
- ``hardware`` — TPU device files and their holders, NVIDIA GPUs, the TPU environment, probed
  before JAX is imported (``probe_hardware``; ``doctor`` reads it).

Names are imported on first use (``adapters_lib.lazy_face``), so ``doctor`` reads the hardware without the estimate's imports.
Inside ``adapters_lib`` and ``workbench`` code imports the modules. No name here is spelled
like a module of the package (``estimate`` is the module; its function is ``estimate.estimate``).
"""

from typing import TYPE_CHECKING

from adapters_lib.lazy_face import lazy_face

if TYPE_CHECKING:
    from .advice import alternatives as alternatives
    from .advice import fit_problem as fit_problem
    from .device import CHIPS as CHIPS
    from .device import Chip as Chip
    from .device import GiB as GiB
    from .device import chip_for_device as chip_for_device
    from .device import device_memory_bytes as device_memory_bytes
    from .device import find_chip as find_chip
    from .device import gpu_fraction as gpu_fraction
    from .device import host_memory_bytes as host_memory_bytes
    from .estimate import ATTENTION_GLOBAL_BLOCK as ATTENTION_GLOBAL_BLOCK
    from .estimate import DTYPE_BYTES as DTYPE_BYTES
    from .estimate import FIT_FRACTION as FIT_FRACTION
    from .estimate import KERNEL_CE_LANE as KERNEL_CE_LANE
    from .estimate import TERMS as TERMS
    from .estimate import MemoryEstimate as MemoryEstimate
    from .estimate import base_param_shapes as base_param_shapes
    from .estimate import ce_chunk_budget_for as ce_chunk_budget_for
    from .estimate import fmt_bytes as fmt_bytes
    from .estimate import kernel_ce_why_not as kernel_ce_why_not
    from .estimate import scored_keys as scored_keys
    from .hardware import LIBTPU_LOCKFILE as LIBTPU_LOCKFILE
    from .hardware import Hardware as Hardware
    from .hardware import probe_hardware as probe_hardware
    from .hardware import probe_nvidia as probe_nvidia
    from .hardware import probe_tpu_files as probe_tpu_files
    from .hardware import probe_tpu_holders as probe_tpu_holders
    from .run_estimate import FITS as FITS
    from .run_estimate import estimate_run as estimate_run
    from .run_estimate import run_program as run_program

__getattr__, __dir__ = lazy_face(__name__)
