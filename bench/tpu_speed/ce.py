"""``ce``: the cross-entropy and its ∂hidden alone at the 1B step's shape: XLA's chunked path,
the splash kernel, the project's kernel at each block size (``TPU_CE_BLOCKS``)."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row


def ce(out: Path) -> list[dict]:
    """The cross-entropy and ∂hidden alone: each kernel at the 1B step's shape, alternating."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.kernels import ce_flash
    from adapters_lib.train import loss as loss_lib

    n, vocab, dim = (256, 2048, 128) if shapes.DRY else (8192, 262144, 1152)
    k = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(k[0], (1, n, dim), jnp.float32).astype(jnp.bfloat16)
    table = (jax.random.normal(k[1], (vocab, dim), jnp.float32) * 0.02).astype(jnp.bfloat16)
    targets = jax.random.randint(k[2], (1, n), 0, vocab)
    mask = jnp.ones((1, n), jnp.int32)
    chunk = 128 if shapes.DRY else 256  # positions of f32 logits a chunk (the 1B step's: 4 rows × 128)
    interpret = jax.devices()[0].platform != "tpu"

    def via(kernel):
        return jax.jit(jax.value_and_grad(lambda x: loss_lib.chunked_ce_sum(
            x, table, targets, mask, chunk=chunk, kernel=kernel)))

    def flash_at(sizes):
        def f(x):
            o, lse = ce_flash.softmax_mean(x[0], table, interpret=interpret, sizes=sizes)
            return jnp.sum(lse), o
        return jax.jit(f)

    fns = {"xla": via("xla"), "splash": via("splash"), "flash (default blocks)": via("flash")}
    default = ce_flash.blocks(n, vocab, dim, 2)
    extra = os.environ.get("TPU_CE_BLOCKS", "" if shapes.DRY else "2048x256,2048x512,1024x1024,1024x512,512x1024,512x512,1024x2048")
    for spec in filter(None, extra.split(",")):
        sizes = tuple(int(x) for x in spec.lower().split("x"))
        fns[f"flash kernel {sizes[0]}x{sizes[1]}"] = flash_at(sizes)
    rows, times, ref = [], {}, None
    for name, fn in list(fns.items()):
        try:
            t = time.perf_counter()
            r = jax.block_until_ready(fn(h))
            times[name] = time.perf_counter() - t
            if name == "xla":
                ref = r
            elif ref is not None and name in ("splash", "flash (default blocks)"):
                rows.append(_row(f"ce check {name}", loss=float(r[0]), loss_xla=float(ref[0]),
                                 grad_max_abs_diff=float(jnp.max(jnp.abs(r[1].astype(jnp.float32) - ref[1].astype(jnp.float32)))),
                                 grad_max_abs=float(jnp.max(jnp.abs(ref[1].astype(jnp.float32))))))
        except Exception as e:  # noqa: BLE001 - a block size the chip refuses is a result
            rows.append(_row(f"ce {name}", error=f"{type(e).__name__}: {e}"[:400]))
            fns.pop(name)
    per = {name: [] for name in fns}
    for _ in range(2 if shapes.DRY else 5):
        for name, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(h))
            per[name].append(time.perf_counter() - t)
    flops = 2 * 2 * n * vocab * dim
    for name, ts in per.items():
        ms = statistics.median(ts) * 1e3
        rows.append(_row(f"ce {name}", ms=ms, tflops=flops / ms / 1e9, compile_s=times[name],
                         n=n, vocab=vocab, dim=dim, default_blocks=default))
    _dump(out, "ce", rows)
    return rows
