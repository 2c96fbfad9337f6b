"""``behind``: ``Steps.compile_behind`` at the Gemma-3-270M shape: a batch whose own program is
still compiling runs in the compiled wide one meanwhile; then its own step, and the first eval."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import _config, random_params, shape_model


def behind(out: Path) -> list[dict]:
    import concurrent.futures

    import jax
    import numpy as np

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps
    from bench.measures import _random_batch

    model = shape_model("270m")
    base = random_params(model)
    b, seq = (2, 128) if shapes.DRY else (4, 1024)
    cfg = _config(b, seq)
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    adapters = lora.init_lora(model, cfg.lora, base, jax.random.key(1))
    fns = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, adapters, seq_len=seq,
                      compile_behind=True)
    rng = np.random.default_rng(0)
    every = fns.put_batch(_random_batch(rng, b, seq, model.config.num_embed))
    host = _random_batch(rng, b, seq, model.config.num_embed)
    host["loss_mask"][:, : 3 * seq // 4] = 0  # the loss on the last quarter: a chat answer
    few = fns.put_batch(host)

    def timed(fn, *args):
        t = time.perf_counter()
        res = fn(*args)
        jax.block_until_ready(res)
        return res, time.perf_counter() - t

    t0 = time.perf_counter()
    eval_started = fns.compile_eval_behind([few])
    state = fns.init_state(adapters)
    (state, _), first_s = timed(fns.train_step, state, every)
    (state, _), few_first_s = timed(fns.train_step, state, few)  # the wide program
    pending = list(fns._train.pending.values())
    meanwhile, wide_s = 0, []
    # --dry (the CPU test): a few wide steps show the batch runs meanwhile; more only compete
    # with the compile for the CPU (36 steps, ~5 s of CPU on 2 cores, measured 2026-12-06)
    most = 3 if shapes.DRY else 2000
    while any(not f.done() for f in pending) and meanwhile < most:
        (state, _), dt = timed(fns.train_step, state, few)
        meanwhile += 1
        wide_s.append(dt)
    concurrent.futures.wait(pending)
    behind_s = time.perf_counter() - t0
    own = []
    for _ in range(3 if shapes.DRY else 8):  # --dry: the own program runs (its timing means nothing)
        (state, _), dt = timed(fns.train_step, state, few)
        own.append(dt)
    _, eval_s = timed(fns.eval_step, state.params, few)
    row = _row("compile behind, Gemma-3-270M shape" if not shapes.DRY else "compile behind (dry)",
               batch=b, seq=seq, slots_every=every.slots, slots_few=few.slots,
               eval_compiles_started=len(eval_started), first_step_s=first_s, few_first_call_s=few_first_s,
               steps_run_while_compiling=meanwhile, until_own_ready_s=behind_s,
               wide_step_s=statistics.median(wide_s) if wide_s else None, own_step_s=statistics.median(own[2:]),
               first_eval_s=eval_s, ran_own=("train", (b, seq), few.slots) in fns._compiled)
    _dump(out, "behind", [row])
    return [row]
