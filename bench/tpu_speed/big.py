"""``big``: the Gemma-3-4B shape trained with LoRA on one chip (the largest batch at seq 2048
the estimate fits)."""

from __future__ import annotations

from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import _config, random_params, shape_model
from bench.tpu_speed.train_point import _ce_budget, train_point


def big(out: Path) -> list[dict]:
    """The Gemma-3-4B shape with LoRA on one chip: the largest batch at seq 2048 the estimate fits."""
    import jax

    from adapters_lib import memory as memory_lib

    model = shape_model("4b")
    base = random_params(model)
    seq = 128 if shapes.DRY else 2048
    dev = jax.devices()[0]
    limit = int((dev.memory_stats() or {}).get("bytes_limit") or 0)
    rows = []
    tried = []
    for batch, remat in ((4, True), (2, True), (1, True)) if not shapes.DRY else ((2, False),):
        cfg = _config(batch, seq, remat=remat)
        est = memory_lib.estimate_run(cfg, model.config, device_count=1, device_bytes=limit,
                                      seq_len=seq, platform=dev.platform,
                                      ce_chunk_bytes=_ce_budget(dev, {}))
        tried.append((batch, remat, est.verdict if not callable(est.verdict) else est.verdict()))
        if limit and tried[-1][2] == "exceeds":
            continue
        try:
            p = train_point(model, base, batch=batch, seq=seq, steps=3 if shapes.DRY else 5, remat=remat)
            rows.append(_row("ours: LoRA step, Gemma-3-4B shape, one chip", estimate_verdicts=tried, **p))
            break
        except Exception as e:  # noqa: BLE001 - try the next smaller batch
            rows.append(_row("ours: Gemma-3-4B shape attempt", batch=batch, remat=remat,
                             error=f"{type(e).__name__}: {e}"[:600]))
    _dump(out, "big", rows)
    return rows
