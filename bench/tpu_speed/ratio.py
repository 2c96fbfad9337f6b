"""``ratio``: ours against the reference route (``bench.refs.RefGemmaTrainer``) at the same
batch, the two alternating (``TPU_RATIO``; ``speed`` adds one such row)."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import _config, random_params, shape_model


def ours_vs_reference(model: Any, base: Any, batch: int = 2, seq: int = 1024) -> list[dict]:
    """Ours and the reference route at the same ``batch × seq``, the two alternating."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.mfu import lora_step_flops
    from bench.refs import RefGemmaTrainer

    b, seq, reps, steps = (2, 128, 2, 2) if shapes.DRY else (batch, seq, 5, 5)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, model.config.num_embed, size=(b, seq), dtype=np.int32)
    mask = np.ones((b, seq), np.int32)
    t0 = time.perf_counter()
    ref = RefGemmaTrainer(model=model, base_params=base, rank=16, learning_rate=1e-4, dtype=jnp.bfloat16)
    ref.step(tokens, mask)
    ref_first = time.perf_counter() - t0

    import dataclasses  # ours, the same batch

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps
    from bench.measures import _random_batch

    cfg = _config(b, seq)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, clip_norm=0.0))
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    t0 = time.perf_counter()
    adapters = lora.init_lora(model, cfg.lora, base, jax.random.key(1))
    fns = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, adapters, seq_len=seq)
    state = fns.init_state(adapters)
    data = fns.put_batch(_random_batch(rng, b, seq, model.config.num_embed))
    state, m = fns.train_step(state, data)
    float(m["loss"])
    ours_first = time.perf_counter() - t0
    holder = {"state": state}

    def run_ours():
        t = time.perf_counter()
        for _ in range(steps):
            holder["state"], m = fns.train_step(holder["state"], data)
            float(m["loss"])  # read back every step, as the reference does
        return (time.perf_counter() - t) / steps

    def run_ref():
        t = time.perf_counter()
        for _ in range(steps):
            ref.step(tokens, mask)
        return (time.perf_counter() - t) / steps

    run_ours(), run_ref()
    ours_t, ref_t = [], []
    for _ in range(reps):
        ours_t.append(run_ours())
        ref_t.append(run_ref())
    o, r = statistics.median(ours_t), statistics.median(ref_t)
    flops = lora_step_flops(model.config, batch=b, seq=seq)
    return [_row("ours vs reference route, same batch", batch=b, seq=seq, ours_s=o, ref_s=r, ratio=r / o,
                 ours_tflops=flops / o / 1e12, ref_tflops=flops / r / 1e12, ours_first_step_s=ours_first,
                 ref_first_step_s=ref_first, reference="gm.nn.LoRA(rank=16) + optax.adamw + jax.jit, full logits")]


def ratio(out: Path) -> list[dict]:
    """Ours against the reference route at the 1B shape's own sequence length, 2048: the
    shapes in ``TPU_RATIO`` (default ``2x2048``: the reference's full f32 logits, 4.3 GB, still
    compile into the chip, 15.6 GB by XLA's deviceless analysis); a shape the reference cannot
    run is a row with its error, and the next shape is tried."""
    model = shape_model("1b")
    base = random_params(model)
    rows = []
    for shape in os.environ.get("TPU_RATIO", "2x2048").split(","):
        b, seq = (int(x) for x in shape.lower().split("x"))
        try:
            rows += ours_vs_reference(model, base, b, seq)
        except Exception as e:  # noqa: BLE001 - an OOM of either side is a result
            rows.append(_row("ours vs reference route, same batch", batch=b, seq=seq,
                             error=f"{type(e).__name__}: {e}"[:600]))
    _dump(out, "ratio", rows)
    return rows
