"""Model FLOPs utilisation: the LoRA step's FLOPs written down, the bf16 matmul peak measured
in the same run, and the GPU row (``bench/gpu_run.sh``; measured only on a GPU machine).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from bench.measures import _cfg, _random_batch, measure
from bench.report import Row

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0}
"""Dense bf16 peak per chip (vendor figures, no sparsity)."""


def lora_step_flops(config, *, batch: int, seq: int) -> float:
    """FLOPs of one LoRA training step, written down.

    Per token: the frozen matmuls run forward (2·N) and backward for the activation
    gradients only (2·N) — no weight gradients — so 4·N, with N the matmul parameters
    (attention and MLP projections plus the tied output embedding V·D; the input embedding
    lookup is free). Attention scores and values: 2 matmuls of s·H per head, forward 4·s·H·heads,
    ×3 for forward + backward, ×½ for the causal mask. Adapter FLOPs are ignored (< 1 %).
    """
    d, f, n, k, h = (config.embed_dim, config.hidden_dim, config.num_heads, config.num_kv_heads,
                     config.head_dim)
    layers = len(config.attention_types)
    per_layer = d * n * h + 2 * d * k * h + n * h * d + 3 * d * f
    matmul_params = layers * per_layer + config.num_embed * d
    attention = layers * 4 * seq * h * n * 3 / 2
    return batch * seq * (4 * matmul_params + attention)


def mfu_point(model, *, batch: int, seq: int, steps: int, ce_chunk_bytes: int | None = None,
              rank: int = 16, profile_to: str | None = None) -> dict:
    """Seconds per LoRA training step of ``model`` (bf16 compute, random tokens) and its TFLOP/s.

    Runs on whatever ``jax.devices()[0]`` is (the GPU measure; a CPU dry run with a small model).
    ``profile_to``: also trace 3 steps with ``jax.profiler`` and return the top device ops.
    """
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    cfg = _cfg(lora={"rank": rank, "alpha": 2.0 * rank, "targets": ["all"], "dtype": "float32"},
               train={"batch_size": batch, "compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
               data={"max_length": seq})
    tokens = jnp.zeros((1, 8), jnp.int32)
    t0 = time.perf_counter()
    base = jax.jit(lambda r: model.init(r, tokens)["params"])(jax.random.key(0))
    adapters = lora.init_lora(model, cfg.lora, base, jax.random.key(1))
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    step_fns = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, adapters, seq_len=seq,
                           ce_chunk_bytes=ce_chunk_bytes)
    state = step_fns.init_state(adapters)
    batch_arrays = step_fns.put_batch(_random_batch(np.random.default_rng(0), batch, seq, model.config.num_embed))
    for _ in range(3):  # compile + warm-up
        state, m = step_fns.train_step(state, batch_arrays)
    jax.block_until_ready(m["loss"])
    setup_s = time.perf_counter() - t0
    print(f"[bench] compiled and warmed up in {setup_s:.0f} s", file=sys.stderr, flush=True)
    t = time.perf_counter()
    for _ in range(steps):
        state, m = step_fns.train_step(state, batch_arrays)
    jax.block_until_ready(m["loss"])
    dt = (time.perf_counter() - t) / steps
    flops = lora_step_flops(model.config, batch=batch, seq=seq)
    out = {"seconds_per_step": dt, "tflops": flops / dt / 1e12, "step_tflop": flops / 1e12,
           "ce_chunk": step_fns.ce_chunk, "setup_s": setup_s, "loss": float(m["loss"])}
    if profile_to:
        holder = {"state": state}  # the state is donated: each step takes the last one's

        def one_step():
            holder["state"], metrics = step_fns.train_step(holder["state"], batch_arrays)
            return metrics

        out["top_ops"] = _profile_top_ops(one_step, profile_to)
    return out


def _profile_top_ops(run_step, logdir: str, n_steps: int = 3, top: int = 30) -> list[tuple[str, float]]:
    """(op name, ms per step) of the longest device ops in a ``jax.profiler`` trace of a few steps."""
    import collections
    import glob
    import gzip
    import json

    import jax

    jax.profiler.start_trace(logdir, create_perfetto_trace=True)
    for _ in range(n_steps):
        m = run_step()
    jax.block_until_ready(m["loss"])
    jax.profiler.stop_trace()
    files = sorted(glob.glob(f"{logdir}/**/*.trace.json.gz", recursive=True))
    if not files:
        return []
    trace = json.load(gzip.open(files[-1]))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    # on an accelerator count only its own timelines (kernels); on CPU the XLA thunks are host
    # events, so drop Python frames and the executor's own spans instead
    devices = {e.get("pid") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and "/device:" in str(e.get("args", {}).get("name", ""))}
    total: collections.Counter = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or (e.get("pid") not in devices if devices else
                                  name.startswith(("$", "Thunk", "Pjit", "Slinky", "CommonPjRt"))):
            continue
        total[name] += e.get("dur", 0)
    return [(name, us / n_steps / 1000) for name, us in total.most_common(top)]


def matmul_tflops(n: int = 8192, reps: int = 10) -> float:
    """Achieved bf16 TFLOP/s of one jitted n×n×n matmul (the machine's practical peak)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    for _ in range(3):
        f(a, b).block_until_ready()
    t = time.perf_counter()
    for _ in range(reps):
        c = f(a, b)
    c.block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e12


@measure("gpu_mfu")
def gpu_mfu(quick: bool = False) -> list[Row]:
    """LoRA MFU at the Gemma-3-1B shape, seq 2048, bf16, random weights (NVIDIA GPU only)."""
    import jax
    import jax.numpy as jnp
    from gemma import gm

    from adapters_lib.memory.estimate import CE_CHUNK_BYTES

    name = "LoRA MFU, Gemma-3-1B shape, seq 2048, bf16 (GPU)"
    dev = jax.devices()[0]
    dry = os.environ.get("BENCH_MFU_DRY") == "1"  # bench/gpu_run.sh --dry-run: the same path, tiny, on CPU
    if dev.platform != "gpu" and not dry:
        return [Row(measure=name, target="≥ 45 %", note="not run: no GPU on this machine")]
    kind = getattr(dev, "device_kind", "")
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)
    model = gm.nn.Gemma3_1B(dtype=jnp.bfloat16)
    b, seq, n = 8, 2048, (10 if quick else 30)
    if dry:
        from adapters_lib.models import demo

        shapes = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, 8), jnp.int32))["params"], jax.random.key(0))
        print(f"[bench] dry run: Gemma3_1B has {sum(x.size for x in jax.tree.leaves(shapes)) / 1e9:.2f} B params; "
              f"{lora_step_flops(model.config, batch=b, seq=seq) / 1e12:.1f} TFLOP per step", file=sys.stderr)
        model, b, seq, n, name = demo.demo_model("bfloat16"), 2, 128, 2, f"{name} [dry run, CPU, demo model]"
    headline_only = os.environ.get("BENCH_MFU_HEADLINE_ONLY") == "1"  # gpu_run.sh --headline
    rows = []
    measured_peak = None
    if not headline_only:
        measured_peak = matmul_tflops(512 if dry else 8192)
        rows.append(Row(measure=f"bf16 matmul {512 if dry else 8192}³ ({kind})", ours=measured_peak,
                        unit="TFLOP/s", note=f"jitted jnp matmul, the practical peak; vendor dense peak {peak} TFLOP/s"))
    profile_dir = None if headline_only else os.environ.get("BENCH_PROFILE_DIR")
    main = mfu_point(model, batch=b, seq=seq, steps=n, profile_to=profile_dir,
                     ce_chunk_bytes=int(os.environ.get("BENCH_CE_CHUNK_BYTES", 0)) or None)
    print(f"[bench] headline: {main}"[:2000], file=sys.stderr, flush=True)
    mfu = main["tflops"] / peak if peak else None
    rows.append(Row(
        measure=name, ours=None if mfu is None else 100 * mfu, unit="% of peak", target="≥ 45 %",
        met=None if mfu is None else mfu >= 0.45,
        note=(f"{kind}: {main['tflops']:.0f} TFLOP/s achieved ({1000 * main['seconds_per_step']:.0f} ms/step, "
              f"{main['step_tflop']:.1f} TFLOP/step), vendor peak {peak} TFLOP/s"
              f"{f', matmul peak measured {measured_peak:.0f}' if measured_peak else ''}; batch {b}×{seq}, LoRA r16 all targets, CE chunk {main['ce_chunk']} "
              f"positions (recomputed in the backward: not counted); "
              f"FLOPs = bench.mfu.lora_step_flops")))
    if main.get("top_ops"):
        print("[bench] top device ops (ms/step):", file=sys.stderr)
        for op, ms in main["top_ops"]:
            print(f"[bench]   {ms:9.3f}  {op[:120]}", file=sys.stderr)
    if not headline_only and (not quick or os.environ.get("BENCH_MFU_VARIANTS")):
        for label, kw in (("CE chunk budget 128 MiB, the CPU default", {"ce_chunk_bytes": CE_CHUNK_BYTES}),
                          ("batch 4", {"batch": 4})):
            args = {"batch": b, "seq": seq, "steps": n, **kw}
            v = mfu_point(model, **args)
            print(f"[bench] {label}: {v}", file=sys.stderr, flush=True)
            rows.append(Row(measure=f"LoRA MFU variant: {label} (GPU)",
                            ours=None if not peak else 100 * v["tflops"] / peak, unit="% of peak",
                            note=f"{v['tflops']:.0f} TFLOP/s, {1000 * v['seconds_per_step']:.0f} ms/step, "
                                 f"CE chunk {v['ce_chunk']}; reported"))
    return rows
