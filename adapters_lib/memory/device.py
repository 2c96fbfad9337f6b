"""Accelerator memory by chip: what a device of a kind holds, for when the backend does not say
(no ``memory_stats``) and for planning a launch on a chip this machine does not have
(``train CONFIG --estimate --device v5e``); and what a device or the host has
(``device_memory_bytes``, ``host_memory_bytes``). JAX only inside ``device_memory_bytes``.

``usable_bytes`` is what JAX's ``memory_stats()["bytes_limit"]`` reports on that chip, the
figure XLA's out-of-memory message compares against ("exceeds 15.75G" on a v5e), where a reading
is known; otherwise the nominal HBM (``source`` says which). On a GPU JAX takes 75 % of the card
by default (``XLA_PYTHON_CLIENT_MEM_FRACTION``), so that share is what a run can use.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

GiB = 2**30
GPU_DEFAULT_FRACTION = 0.75
"""JAX's default share of a GPU's memory (``XLA_PYTHON_CLIENT_MEM_FRACTION``)."""


@dataclass(frozen=True)
class Chip:
    """One accelerator kind: its names, platform and memory per device."""

    name: str
    platform: str
    """``tpu`` or ``gpu`` (``jax.Device.platform``)."""
    hbm_bytes: int
    """Nominal memory per device."""
    limit_bytes: int = 0
    """JAX's ``bytes_limit`` on the chip where a reading is known (0: not known)."""
    aliases: tuple[str, ...] = ()
    """Names a user types and ``device_kind`` strings JAX reports (matched without case,
    spaces or dashes)."""
    source: str = ""

    @property
    def usable_bytes(self) -> int:
        """What a run may use: the reading, else the nominal memory (a GPU: JAX's share)."""
        if self.limit_bytes:
            return self.limit_bytes
        if self.platform == "gpu":
            return int(self.hbm_bytes * gpu_fraction())
        return self.hbm_bytes


CHIPS: tuple[Chip, ...] = (
    Chip("TPU v4", "tpu", 32 * GiB, int(30.75 * GiB), ("v4", "tpu v4", "tpuv4"),
         "XLA:TPU's HBM capacity on a v4 chip (out-of-memory reports: 'of 30.75G hbm')"),
    Chip("TPU v5e", "tpu", 16 * GiB, 16_909_336_064, ("v5e", "tpu v5e", "v5 lite", "tpu v5 lite", "v5litepod"),
         "bytes_limit read on a TPU v5e chip (XLA: 'exceeds 15.75G')"),
    Chip("TPU v5p", "tpu", 95 * GiB, 0, ("v5p", "tpu v5p", "tpu v5"),
         "nominal HBM (no bytes_limit reading)"),
    Chip("TPU v6e", "tpu", 32 * GiB, 33_550_237_696, ("v6e", "tpu v6e", "v6 lite", "tpu v6 lite", "trillium"),
         "bytes_limit of a v6e chip as reported by vLLM's usage stats ('of 31.25G hbm')"),
    Chip("NVIDIA H200", "gpu", 141 * 10**9, 0, ("h200", "nvidia h200"), "nominal"),
    Chip("NVIDIA H100", "gpu", 80 * GiB, 0, ("h100", "nvidia h100", "nvidia h100 80gb hbm3", "h100 pcie"),
         "nominal"),
    Chip("NVIDIA A100 80GB", "gpu", 80 * GiB, 0, ("a100-80gb", "a100 80gb", "nvidia a100-sxm4-80gb",
                                                   "nvidia a100 80gb pcie"), "nominal"),
    Chip("NVIDIA A100 40GB", "gpu", 40 * GiB, 0, ("a100", "a100-40gb", "nvidia a100-sxm4-40gb",
                                                   "nvidia a100-pcie-40gb"), "nominal"),
    Chip("NVIDIA L4", "gpu", 24 * GiB, 0, ("l4", "nvidia l4"), "nominal"),
    Chip("NVIDIA A10G", "gpu", 24 * GiB, 0, ("a10g", "nvidia a10g"), "nominal"),
    Chip("NVIDIA RTX 4090", "gpu", 24 * GiB, 0, ("rtx 4090", "4090", "nvidia geforce rtx 4090"), "nominal"),
    Chip("NVIDIA V100 16GB", "gpu", 16 * GiB, 0, ("v100", "tesla v100-sxm2-16gb"), "nominal"),
)


def gpu_fraction() -> float:
    try:
        return float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", GPU_DEFAULT_FRACTION))
    except ValueError:
        return GPU_DEFAULT_FRACTION


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def find_chip(name: str) -> Chip | None:
    """The chip a name or a ``device_kind`` means (``v5e``, ``TPU v5 lite``, ``h100``), else None.

    A GPU name that states its memory (``Tesla V100-SXM2-32GB``) gets that memory."""
    key = _key(name)
    for chip in CHIPS:
        if key in {_key(a) for a in (chip.name, *chip.aliases)}:
            return chip
    stated = re.search(r"(\d+)\s*gb", name.lower())
    for chip in CHIPS:  # a longer device_kind that contains a known GPU's name
        if chip.platform == "gpu" and any(_key(a) in key for a in chip.aliases if len(_key(a)) >= 4):
            if stated:
                return Chip(name, "gpu", int(stated.group(1)) * GiB, 0, (), "memory stated in its name")
            return chip
    return None


def chip_for_device(device: object) -> Chip | None:
    """The table's chip for a ``jax.Device`` (by its ``device_kind``), else None."""
    kind = getattr(device, "device_kind", "") or ""
    return find_chip(kind) if kind else None


def names() -> list[str]:
    """The short names ``--device`` takes (one per chip)."""
    return [c.aliases[0] for c in CHIPS]


def host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def device_memory_bytes(device: Any = None) -> int:
    """The memory of one device: ``memory_stats()['bytes_limit']`` where the backend
    reports it, else the chip table's (``CHIPS``, by ``device_kind``); for CPU
    devices the host RAM shared by the local CPU devices."""
    import jax

    device = device if device is not None else jax.local_devices()[0]
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - some backends raise instead of returning None
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu":
        count = max(1, len([d for d in jax.local_devices() if d.platform == "cpu"]))
        return host_memory_bytes() // count
    chip = chip_for_device(device)
    return chip.usable_bytes if chip else 0
