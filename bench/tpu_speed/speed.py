"""``speed``: the bf16 matmul peak; ours at the Gemma-3-1B shape (MFU, memory against the
estimate, ``TPU_VARIANTS``); ours against the reference route at ``TPU_SPEED_REF``."""

from __future__ import annotations

import os
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.chip import peak_of
from bench.tpu_speed.ratio import ours_vs_reference
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import random_params, shape_model
from bench.tpu_speed.train_point import train_point


def speed(out: Path) -> list[dict]:
    import jax

    from bench.mfu import matmul_tflops

    rows = []
    dev = jax.devices()[0]
    n = 512 if shapes.DRY else 8192
    rows.append(_row("bf16 matmul peak", n=n, tflops=matmul_tflops(n), vendor_peak=peak_of(dev),
                     device=dev.device_kind))
    model = shape_model("1b")
    base = random_params(model)
    b, seq, steps = (2, 128, 2) if shapes.DRY else (int(os.environ.get("TPU_BATCH", 4)), 2048, 10)
    main = train_point(model, base, batch=b, seq=seq, steps=steps,
                       profile_to=None if shapes.DRY else str(out / "profile-trace"))
    top = main.pop("top_ops", None)
    rows.append(_row("ours: LoRA step, Gemma-3-1B shape", **main))
    if top:
        rows.append(_row("ours: top device ops (ms/step)", ops=[(op[:100], round(ms, 3)) for op, ms in top]))
    for label in filter(None, os.environ.get("TPU_VARIANTS", "").split(",")):
        kw = {"blocked": {"attention_kind": "blocked"}, "barrier": {"weight_barrier": True},
              "ce64": {"ce_chunk_bytes": max(128 * 2**20, int(main.get("bytes_limit") or 0) // 64)},
              "remat": {"remat": True}, "cexla": {"ce_kernel": "xla"}, "cesplash": {"ce_kernel": "splash"},
              "gemmamlp": {"slot_major_mlp": False},
              "b8": {}, "b16": {}}[label]
        batch = {"b8": 8, "b16": 16}.get(label, b)
        try:
            v = train_point(model, base, batch=batch, seq=seq, steps=steps, memory=label.startswith("b"), **kw)
            rows.append(_row(f"ours, variant {label}", **v))
        except Exception as e:  # noqa: BLE001 - an OOM is a result
            rows.append(_row(f"ours, variant {label}", error=f"{type(e).__name__}: {e}"[:600]))
    ref_shape = os.environ.get("TPU_SPEED_REF", "2x1024")  # empty: no reference rows (`ratio` has them)
    if ref_shape:
        rb, rs = (int(x) for x in ref_shape.lower().split("x"))
        rows += ours_vs_reference(model, base, rb, rs)
    _dump(out, "speed", rows)
    return rows
