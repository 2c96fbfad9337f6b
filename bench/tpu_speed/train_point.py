"""Ours at one point: a LoRA step's seconds, TFLOP/s, MFU, first-step seconds and compiled
memory beside the estimate (``speed``, ``big`` and ``first-step`` measure through it)."""

from __future__ import annotations

import time
from typing import Any

from bench.tpu_speed.chip import peak_of
from bench.tpu_speed.shapes import _config


def train_point(model: Any, base: Any, *, batch: int, seq: int, steps: int, memory: bool = True,
                profile_to: str | None = None, **build: Any) -> dict[str, Any]:
    """Ours: seconds a step of a LoRA step at ``batch × seq`` (random tokens), its TFLOP/s, the
    seconds to the first step's loss (trace + compile + run), and the compiled step's memory
    beside the estimate's. ``build``: ``build_steps`` keywords and ``remat``. ``steps=0``: the
    first step alone (``first_step_s``, ``loss_first``; no warm-up, nothing timed after it)."""
    import jax
    import numpy as np

    from adapters_lib import lora
    from adapters_lib import memory as memory_lib
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps
    from bench.measures import _random_batch
    from bench.mfu import _profile_top_ops, lora_step_flops

    remat = bool(build.pop("remat", False))
    cfg = _config(batch, seq, remat=remat)
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    t0 = time.perf_counter()
    adapters = lora.init_lora(model, cfg.lora, base, jax.random.key(1))
    fns = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, adapters, seq_len=seq, **build)
    state = fns.init_state(adapters)
    data = fns.put_batch(_random_batch(np.random.default_rng(0), batch, seq, model.config.num_embed))
    state, m = fns.train_step(state, data)
    loss0 = float(m["loss"])
    first_s = time.perf_counter() - t0
    if not steps:
        return {"batch": batch, "seq": seq, "first_step_s": first_s, "loss_first": loss0}
    for _ in range(2):
        state, m = fns.train_step(state, data)
    jax.block_until_ready(m["loss"])
    t = time.perf_counter()
    for _ in range(steps):
        state, m = fns.train_step(state, data)
    jax.block_until_ready(m["loss"])
    dt = (time.perf_counter() - t) / steps
    flops = lora_step_flops(model.config, batch=batch, seq=seq)
    dev = jax.devices()[0]
    peak = peak_of(dev)
    out = {"batch": batch, "seq": seq, "seconds_per_step": dt, "tflops": flops / dt / 1e12,
           "mfu": (flops / dt / 1e12 / peak) if peak else None, "tokens_per_s": batch * seq / dt,
           "first_step_s": first_s, "loss_first": loss0, "loss_last": float(m["loss"]),
           "ce_chunk": fns.ce_chunk, "attention": fns.attention_kind, "remat": remat,
           **{k: v for k, v in build.items() if isinstance(v, (int, float, str, bool, type(None)))}}
    stats = dev.memory_stats() or {}
    out["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
    out["bytes_limit"] = stats.get("bytes_limit")
    if memory:
        try:
            out["xla_memory"] = fns.compiled_memory((batch, seq))
            # the chip's own coefficients (platform): the CPU's counted this step at 39 GB
            # against XLA's 14.5 GB on the v5e (2026-12-05)
            est = memory_lib.estimate_run(cfg, model.config, device_count=1,
                                          device_bytes=int(stats.get("bytes_limit") or 0),
                                          seq_len=seq, ce_chunk_bytes=_ce_budget(dev, build),
                                          platform=dev.platform)
            out["estimate"] = est.to_dict() if hasattr(est, "to_dict") else str(est)
            total = est.total if not callable(getattr(est, "total", None)) else est.total()
            out["estimate_total"] = int(total)
            out["estimate_error"] = int(total) / out["xla_memory"]["total"] - 1
        except Exception as e:  # noqa: BLE001 - a measure, not a failure
            out["memory_error"] = f"{type(e).__name__}: {e}"[:300]
    if profile_to:
        holder = {"state": state}

        def one():
            holder["state"], metrics = fns.train_step(holder["state"], data)
            return metrics

        out["top_ops"] = _profile_top_ops(one, profile_to, top=25)
    del state
    return out


def _ce_budget(device: Any, build: dict) -> int:
    from adapters_lib.memory.estimate import ce_chunk_budget

    return int(build.get("ce_chunk_bytes") or ce_chunk_budget(device))
