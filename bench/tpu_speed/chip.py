"""The chips' dense bf16 peaks (the MFU's denominator)."""

from __future__ import annotations

from typing import Any

PEAK_BF16_TFLOPS = {"TPU v5 lite": 197.0, "TPU v5e": 197.0, "TPU v6 lite": 918.0, "TPU v5p": 459.0,
                    "TPU v4": 275.0}
"""Dense bf16 peak per chip (Google's figures)."""


def peak_of(device: Any) -> float | None:
    kind = getattr(device, "device_kind", "")
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)
