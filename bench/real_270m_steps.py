"""What the real-270M measures share (``real_270m``, ``real_270m_gsm8k``): the run config,
our LoRA steps, and timed runners of ours and of ref-gemma's."""

from __future__ import annotations

import time

from bench.measures import _cfg


def _steps(cfg, loaded, params, seq: int, **kw):
    import jax

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    trainable = lora.init_lora(loaded.model, cfg.lora, params, jax.random.key(0))
    steps = build_steps(loaded.model, cfg, make_optimizer(cfg.train), mesh, params, trainable,
                        seq_len=seq, **kw)
    return steps, steps.init_state(trainable)


def _runner(steps, state, batches):
    """A timed function running ``batches`` through ``steps`` (state carried, one sync at the end)."""
    import jax

    dev = [steps.put_batch(x) for x in batches]
    holder = {"state": state}

    def run() -> float:
        t = time.perf_counter()
        st = holder["state"]
        for x in dev:
            st, metrics = steps.train_step(st, x)
        jax.block_until_ready(metrics["loss"])
        holder["state"] = st
        return time.perf_counter() - t
    return run


def _ref_runner(ref, batches):
    def run() -> float:
        t = time.perf_counter()
        for tk, mk in batches:
            ref.step(tk, mk)
        return time.perf_counter() - t
    return run


def _train_cfg(b: int, seq: int, dtype: str, **data):
    return _cfg(lora={"rank": 8, "alpha": 8.0, "targets": ["all"]},
                train={"batch_size": b, "learning_rate": 1e-3, "schedule": "constant", "warmup_steps": 0,
                       "clip_norm": 0.0, "compute_dtype": dtype, "param_dtype": dtype},
                data={"max_length": seq, **data})
