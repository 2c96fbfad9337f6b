"""What a compile on another thread does to the steps running beside it, phase by phase.

On the v5e the 1B's loop saw steps of 0.31 s take 2.4–7.5 s for a few seconds, with the host
free (the stack sampler never late), each time near the end of a program compiled behind. This
probe splits such a compile into its phases — XLA's compile with nothing loaded
(``client.compile``), the executable's serialization, its load onto the device
(``client.deserialize_executable``) — and then JAX's usual ``compile()`` (compile and load in
one), while the main thread runs a fixed step back to back and times each. It runs with the
device nearly empty and again with it filled (``--fill``, a share of the device's bytes held by
an array), as the 1B's LoRA family fills it.

``python -m bench.compile_beside_steps [--out DIR] [--layers N] [--fill 0,0.9]``: prints a line
a phase (the steps' median and longest seconds while it ran) and writes ``DIR/compile_beside.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.outdir import default_out


def _log(*parts: Any) -> None:
    print("[beside]", *parts, file=sys.stderr, flush=True)


def _big_program(layers: int, seed: int) -> tuple[Any, tuple[Any, ...]]:
    """A program whose compile takes a while: ``layers`` distinct blocks (different widths, so
    nothing is shared), forward and backward, with an attention-like softmax in each."""
    import jax
    import jax.numpy as jnp

    widths = [256 + 64 * ((i * 7 + seed) % 13) for i in range(layers + 1)]
    params = [jax.ShapeDtypeStruct((widths[i], widths[i + 1]), jnp.bfloat16) for i in range(layers)]
    x = jax.ShapeDtypeStruct((8, 128, widths[0]), jnp.bfloat16)

    def loss(ws: list[Any], h: Any) -> Any:
        for w in ws:
            h = h @ w
            scores = jax.nn.softmax((h @ jnp.swapaxes(h, -1, -2)).astype(jnp.float32) / 16.0, axis=-1)
            h = jax.nn.gelu(scores.astype(h.dtype) @ h) + seed
            h = h / (1.0 + jnp.abs(h).mean(-1, keepdims=True))
        return jnp.mean(h.astype(jnp.float32) ** 2)

    return jax.jit(jax.grad(loss)), (params, x)


def _step(n: int) -> tuple[Any, Any]:
    """The steady step: a chain of bf16 ``n × n`` matmuls (8192: ~0.2 s on a v5e), with
    temporaries."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(a: Any, b: Any) -> Any:
        for _ in range(24):
            a = jnp.tanh(a @ b)
        return a

    a = jnp.ones((n, n), jnp.bfloat16) * 0.01
    return step, a


def _phases(layers: int, seed: int, marks: list[tuple[str, float, float]]) -> None:
    import jax
    from jax._src import compiler
    from jax._src.lib import xla_client as xc

    fn, args = _big_program(layers, seed)
    t = time.perf_counter()
    lowered = fn.lower(*args)
    marks.append(("lower", t, time.perf_counter()))
    device = jax.devices()[0]
    devices = xc.DeviceList((device,))
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1, backend=device.client)
    module = lowered.compiler_ir("stablehlo")
    t = time.perf_counter()
    unloaded = device.client.compile(module, executable_devices=devices, compile_options=options)
    marks.append(("compile, nothing loaded", t, time.perf_counter()))
    t = time.perf_counter()
    data = unloaded.serialize()
    marks.append((f"serialize ({len(data) / 2**20:.1f} MiB)", t, time.perf_counter()))
    t = time.perf_counter()
    loaded = device.client.deserialize_executable(data, devices, compile_options=options)
    marks.append(("load onto the device", t, time.perf_counter()))
    del loaded
    fn2, args2 = _big_program(layers, seed + 1)
    t = time.perf_counter()
    fn2.lower(*args2).compile()
    marks.append(("JAX's compile() (compile and load)", t, time.perf_counter()))


def measure(layers: int, fill: float, seed: int, n: int = 8192) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    step, a = _step(n)
    b = jnp.eye(n, dtype=jnp.bfloat16)
    step(a, b).block_until_ready()
    ballast = None
    stats = jax.devices()[0].memory_stats() or {}
    limit, used = stats.get("bytes_limit", 0), stats.get("bytes_in_use", 0)
    if fill > 0 and limit:
        # room for the step's temporaries (two 8192² bf16 arrays) and the big program's
        free = int(limit * fill) - used - 4 * n * n * 2
        if free > 0:
            ballast = jnp.zeros((free // 2,), jnp.bfloat16).block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    _log(f"fill {fill}: {stats.get('bytes_in_use', 0) / 2**30:.2f} of {limit / 2**30:.2f} GiB in use")
    marks: list[tuple[str, float, float]] = []
    errors: list[str] = []

    def work() -> None:
        try:
            _phases(layers, seed, marks)
        except Exception as e:  # noqa: BLE001 - reported with the steps
            errors.append(f"{type(e).__name__}: {e}")

    steps: list[tuple[float, float]] = []
    for _ in range(5):
        t = time.perf_counter()
        step(a, b).block_until_ready()
        steps.append((t, time.perf_counter() - t))
    thread = threading.Thread(target=work, name="compile-beside")
    start = time.perf_counter()
    thread.start()
    while thread.is_alive() or time.perf_counter() - start < 3:
        t = time.perf_counter()
        step(a, b).block_until_ready()
        steps.append((t, time.perf_counter() - t))
    end = time.perf_counter()
    for _ in range(5):
        t = time.perf_counter()
        step(a, b).block_until_ready()
        steps.append((t, time.perf_counter() - t))
    del ballast
    quiet = [dt for t, dt in steps if t < start] + [dt for t, dt in steps if t > end]
    rows = []
    for name, t0, t1 in marks:
        inside = [dt for t, dt in steps if t0 <= t + dt and t <= t1]
        row = {"phase": name, "seconds": round(t1 - t0, 2), "steps": len(inside),
               "median_step_s": round(statistics.median(inside), 4) if inside else None,
               "longest_step_s": round(max(inside), 4) if inside else None}
        rows.append(row)
        _log(f"fill {fill}: {name}: {row['seconds']} s; steps beside: {row['steps']}, median "
             f"{row['median_step_s']} s, longest {row['longest_step_s']} s")
    _log(f"fill {fill}: quiet steps median {statistics.median(quiet):.4f} s")
    slow = [(round(t - start, 2), round(dt, 3)) for t, dt in steps if dt > 2 * statistics.median(quiet)]
    if slow:
        _log(f"fill {fill}: slow steps (s after the thread's start, seconds): {slow[:20]}")
    return {"fill": fill, "bytes_limit": limit, "quiet_median_s": statistics.median(quiet), "phases": rows,
            "slow_steps": slow, "errors": errors,
            "marks": [(n, round(t0 - start, 3), round(t1 - start, 3)) for n, t0, t1 in marks]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compile_beside_steps")
    p.add_argument("--out", type=Path, default=Path(default_out("compile_beside_steps")))
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--fill", default="0,0.9")
    p.add_argument("--width", type=int, default=8192, help="the step's matmul size")
    a = p.parse_args(argv)
    results = [measure(a.layers, float(f), seed, a.width) for seed, f in enumerate(a.fill.split(","))]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "compile_beside.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
