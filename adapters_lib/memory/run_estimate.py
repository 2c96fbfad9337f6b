"""A ``RunConfig``'s memory estimate, of the program its run will train in (pure: no JAX).

``estimate_run(cfg, config, device_count=…)`` is ``estimate.estimate`` for a run's settings;
``run_program`` says which LoRA family (rank bucket) the run trains in: with
``train.programs = "auto"``, the largest whose padded adapters fit ``FITS`` of the device.
"""

from __future__ import annotations

from typing import Any

from adapters_lib import mesh as mesh_lib
from adapters_lib.lora.family import resolve, run_family
from adapters_lib.memory.estimate import CE_CHUNK_BYTES, MemoryEstimate, estimate

FITS = 0.95
"""The share of a device's memory a LoRA family's padded program may take ("auto"): the rest is
the margin for the estimate's error (on the v5e at the Gemma-3-1B shape, 4 × 2048: rank 128
estimated 16.13 GiB where XLA asked 15.99; the exact program 14.49 where XLA's step took 14.60)."""


def estimate_run(cfg: Any, config: Any, *, device_count: int, device_bytes: int = 0,
                 seq_len: int | None = None, ce_chunk_bytes: int = CE_CHUNK_BYTES,
                 platform: str = "cpu") -> MemoryEstimate:
    """``estimate`` for a ``RunConfig`` on ``device_count`` devices (``ce_chunk_bytes``: the
    train step's budget, ``train.loss.ce_chunk_budget`` of the device), of the program the run
    will train in (``run_program``: with "auto" and a known ``device_bytes``, the family's bucket
    that fits)."""
    kw = dict(device_count=device_count, device_bytes=device_bytes, seq_len=seq_len,
              ce_chunk_bytes=ce_chunk_bytes, platform=platform)
    return _estimate_in(cfg, config, run_program(cfg, config, **kw), **kw)


def _estimate_in(cfg: Any, config: Any, family: Any, *, device_count: int, device_bytes: int,
                 seq_len: int | None, ce_chunk_bytes: int, platform: str) -> MemoryEstimate:
    spec = mesh_lib.resolve(cfg.mesh, device_count)
    return estimate(
        config, batch_size=cfg.train.batch_size, seq_len=seq_len or cfg.data.max_length,
        mesh_shape=spec.shape, lora_enabled=cfg.lora.enabled, lora_rank=cfg.lora.rank,
        lora_targets=tuple(cfg.lora.targets), lora_dtype=cfg.lora.dtype,
        param_dtype=cfg.train.param_dtype, compute_dtype=cfg.train.compute_dtype,
        remat=cfg.train.remat, grad_accum=cfg.train.grad_accum, device_bytes=device_bytes,
        ce_chunk_bytes=ce_chunk_bytes, quantize=cfg.model.quantize,
        quantize_tile=cfg.model.quantize_tile_size, quantize_embedding=cfg.model.quantize_embedding,
        objective=cfg.train.objective,
        reference=cfg.train.reference, platform=platform,
        lora_program=(family.program.rank, family.program.targets) if family is not None else None)


def run_program(cfg: Any, config: Any, *, device_count: int, device_bytes: int = 0,
                seq_len: int | None = None, ce_chunk_bytes: int = CE_CHUNK_BYTES,
                platform: str = "cpu") -> Any:
    """The LoRA family the run trains in (``lora.family.run_family``), or None for its exact
    program. With ``train.programs = "auto"`` and a known ``device_bytes``: the largest rank
    bucket, halving from the platform's (128 on a TPU) down to the run's own rank, whose padded
    adapters fit ``FITS`` of the device (the Gemma-3-1B shape at 4 × 2048 on a 16 GiB v5e does not
    fit rank 128); None when none does and the exact program is smaller."""
    family = run_family(cfg, platform)
    if family is None or cfg.train.programs != "auto" or not device_bytes:
        return family
    kw = dict(device_count=device_count, device_bytes=device_bytes, seq_len=seq_len,
              ce_chunk_bytes=ce_chunk_bytes, platform=platform)
    first = _estimate_in(cfg, config, family, **kw)
    bucket, at = family.program.rank, family
    while True:
        if (first if at is family else _estimate_in(cfg, config, at, **kw)).total <= device_bytes * FITS:
            return at
        if bucket // 2 < int(cfg.lora.rank):
            break
        bucket //= 2
        at = resolve(cfg.lora, programs="family", platform=platform, bucket=bucket)
    own = _estimate_in(cfg, config, None, **kw)
    return None if own.total < first.total else family
