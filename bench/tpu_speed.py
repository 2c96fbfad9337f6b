"""Speed on a TPU, measured side by side in one run (``scripts/tpu_device.sh check NAME``).

``python -m bench.tpu_speed NAME [--out DIR] [--dry]``, NAME one of:

- ``speed``: the bf16 matmul peak; ours at the Gemma-3-1B shape (seq 2048, bf16, LoRA r16 on
  all targets, random weights and tokens): seconds a step, TFLOP/s, MFU against the chip's
  vendor peak, the compiled step's memory against the estimate; ours against the reference
  route (``bench.refs.RefGemmaTrainer``: ``gm.nn.LoRA`` + optax + ``jax.jit``) at the same
  batch, the two alternating; ``TPU_VARIANTS`` (comma-separated: ``blocked``, ``ce64``,
  ``barrier``, ``remat``, ``b8``, ``cexla``: XLA's chunked cross-entropy, ``cesplash``: the
  cross-entropy by JAX's splash kernel, both of which the project's kernel replaced on a TPU;
  ``gemmamlp``: gemma's own ``[B, T, 2, F]`` gate/up layout, ``variants.slot_major_mlp`` off)
  adds rows for the settings the defaults replaced; ``TPU_SPEED_REF`` (default ``2x1024``,
  empty: none) the shape of the rows against the reference route;
- ``ce``: the cross-entropy and its ∂hidden alone at that step's shape (8192 rows, the 262k
  vocabulary, D 1152): XLA's chunked path, the splash kernel, the project's kernel at each
  block size that fits (``TPU_CE_BLOCKS``, e.g. ``2048x256,1024x1024``), ms and TFLOP/s
  (``compile_s``: the first call, compile and run);
- ``first-step``: seconds from a new process to the first step's loss at that shape, twice:
  cold (empty compile cache and program store), then warm (what the first left); the warm
  process then launches twice more with its weights held, as the engine does: its kept
  programs, then the program store read back (``relaunch_kept_s``, ``relaunch_store_s``);
- ``ratio``: ours against the reference route at seq 2048 (``TPU_RATIO``, default ``2x2048``);
- ``big``: the Gemma-3-4B shape trained with LoRA on one chip (the largest batch the estimate
  fits at seq 2048);
- ``decode``: A/B decode at the 1B shape (base and tuned side by side, our batched sampler)
  against two plain ``gm.text.Sampler`` loops, tokens/s a side; needs a 262k-vocabulary
  tokenizer (``TOKENIZER``: the device script's bundle carries the real 270M's, rebuilt from
  its GGUF; default ``.tpu/extra/tokenizer.model``);
- ``behind``: ``Steps.compile_behind`` at the Gemma-3-270M shape (4 × 1024): a batch whose own
  program is not compiled yet (loss on its last quarter) runs in the compiled all-positions
  one while its own compiles in the background; the seconds its first call took (a step, not
  a compile), the steps run meanwhile, then its own program's step against the wide one's, and
  the first eval's seconds with the eval step compiled behind from the start;
- ``memory``: ``bench.memory_fit`` at the 1B shape (the estimate against XLA's compiled
  figures, batch 2/4/8, remat off and on).

``--dry``: the same code on this machine's CPU with the demo model's shape and short
sequences (a check that the script runs; its numbers mean nothing). Results: one JSON file a
measure in ``--out`` and a line a row on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PEAK_BF16_TFLOPS = {"TPU v5 lite": 197.0, "TPU v5e": 197.0, "TPU v6 lite": 918.0, "TPU v5p": 459.0,
                    "TPU v4": 275.0}
"""Dense bf16 peak per chip (Google's figures)."""

DRY = False


def _log(*parts: Any) -> None:
    print("[tpu]", *parts, file=sys.stderr, flush=True)


def peak_of(device: Any) -> float | None:
    kind = getattr(device, "device_kind", "")
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)


def shape_model(name: str) -> Any:
    """A gemma model of a named release's shape (bf16 compute); ``--dry``: the demo model."""
    from bench.memory_fit import text_model

    return text_model("demo" if DRY else name)


def random_params(model: Any, dtype: str = "bfloat16") -> Any:
    """Random base weights in ``dtype``, made leaf by leaf on the device (a 4B model's f32
    ``init`` would not fit one 16 GiB chip): one small program a leaf shape, 26-32 s for the 1B
    cold on the v5e, 6-9 s with the compile cache. One program making every leaf (``rbg`` keys)
    took 194 s cold there (2026-12-06): XLA:TPU compiles ~340 RNG outputs slowly."""
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, 8), jnp.int32))["params"], jax.random.key(0))
    leaves, tree = jax.tree.flatten(shapes)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    make = jax.jit(lambda k, shape: (jax.random.normal(k, shape, jnp.float32) * 0.02).astype(dtype),
                   static_argnums=1)
    return jax.tree.unflatten(tree, [make(k, s.shape) for k, s in zip(keys, leaves, strict=True)])


def _config(batch: int, seq: int, rank: int = 16, **train: Any) -> Any:
    from bench.measures import _cfg

    return _cfg(lora={"rank": rank, "alpha": 2.0 * rank, "targets": ["all"], "dtype": "float32"},
                train={"batch_size": batch, "compute_dtype": "bfloat16", "param_dtype": "bfloat16",
                       "learning_rate": 1e-4, "schedule": "constant", "warmup_steps": 0, **train},
                data={"max_length": seq})


def train_point(model: Any, base: Any, *, batch: int, seq: int, steps: int, memory: bool = True,
                profile_to: str | None = None, **build: Any) -> dict[str, Any]:
    """Ours: seconds a step of a LoRA step at ``batch × seq`` (random tokens), its TFLOP/s, the
    seconds to the first step's loss (trace + compile + run), and the compiled step's memory
    beside the estimate's. ``build``: ``build_steps`` keywords and ``remat``."""
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
    from adapters_lib.train.loss import ce_chunk_budget

    return int(build.get("ce_chunk_bytes") or ce_chunk_budget(device))


def _row(name: str, **fields: Any) -> dict[str, Any]:
    row = {"measure": name, **fields}
    print(json.dumps(row, default=str), flush=True)
    return row


def _dump(out: Path, name: str, rows: list[dict]) -> None:
    import jax

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "jax": jax.__version__,
            "device": str(jax.devices()[0].device_kind), "devices": jax.device_count()}
    try:
        import importlib.metadata as md

        meta |= {p: md.version(p) for p in ("jaxlib", "libtpu", "gemma", "flax", "optax")
                 if _has_dist(md, p)}
    except Exception:  # noqa: BLE001
        pass
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))


def _has_dist(md: Any, name: str) -> bool:
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False


# --------------------------------------------------------------------------- measures


def speed(out: Path) -> list[dict]:
    import jax

    from bench.mfu import matmul_tflops

    rows = []
    dev = jax.devices()[0]
    n = 512 if DRY else 8192
    rows.append(_row("bf16 matmul peak", n=n, tflops=matmul_tflops(n), vendor_peak=peak_of(dev),
                     device=dev.device_kind))
    model = shape_model("1b")
    base = random_params(model)
    b, seq, steps = (2, 128, 2) if DRY else (int(os.environ.get("TPU_BATCH", 4)), 2048, 10)
    main = train_point(model, base, batch=b, seq=seq, steps=steps,
                       profile_to=None if DRY else str(out / "profile-trace"))
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


def ce(out: Path) -> list[dict]:
    """The cross-entropy and ∂hidden alone: each kernel at the 1B step's shape, alternating."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.train import ce_flash
    from adapters_lib.train import loss as loss_lib

    n, vocab, dim = (256, 2048, 128) if DRY else (8192, 262144, 1152)
    k = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(k[0], (1, n, dim), jnp.float32).astype(jnp.bfloat16)
    table = (jax.random.normal(k[1], (vocab, dim), jnp.float32) * 0.02).astype(jnp.bfloat16)
    targets = jax.random.randint(k[2], (1, n), 0, vocab)
    mask = jnp.ones((1, n), jnp.int32)
    chunk = 128 if DRY else 256  # positions of f32 logits a chunk (the 1B step's: 4 rows × 128)
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
    extra = os.environ.get("TPU_CE_BLOCKS", "" if DRY else "2048x256,2048x512,1024x1024,1024x512,512x1024,512x512,1024x2048")
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
    for _ in range(2 if DRY else 5):
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


def ours_vs_reference(model: Any, base: Any, batch: int = 2, seq: int = 1024) -> list[dict]:
    """Ours and the reference route at the same ``batch × seq``, the two alternating."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.mfu import lora_step_flops
    from bench.refs import RefGemmaTrainer

    b, seq, reps, steps = (2, 128, 2, 2) if DRY else (batch, seq, 5, 5)
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


def first_step(out: Path) -> list[dict]:
    """Cold and warm seconds to the first step, each in a new process (the engine's caches on)."""
    import shutil
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="wb-cache-"))
    rows = []
    for label in ("cold", "warm"):
        env = dict(os.environ, GEMMA_WORKBENCH_COMPILE_CACHE=str(cache / "compile"),
                   GEMMA_WORKBENCH_PROGRAMS=str(cache / "programs"))
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "bench.tpu_speed", "first-step-once"] + (["--dry"] if DRY else [])
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        sys.stderr.write(res.stderr[-3000:])
        line = next((x for x in reversed(res.stdout.splitlines()) if x.startswith("{")), "{}")
        rows.append(_row(f"time to first step, {label}", process_wall_s=wall, **json.loads(line)))
    shutil.rmtree(cache, ignore_errors=True)
    _dump(out, "first_step", rows)
    return rows


def first_step_once() -> None:
    t_start = time.perf_counter()
    import jax

    from adapters_lib import tf_deferred
    from adapters_lib.engine import devices

    tf_deferred.install()
    devices.enable_compile_cache(jax)
    jax.devices()
    t_jax = time.perf_counter() - t_start
    model = shape_model("1b")
    base = random_params(model)
    jax.block_until_ready(base)
    t_weights = time.perf_counter() - t_start
    b, seq = (2, 128) if DRY else (4, 2048)
    p = train_point(model, base, batch=b, seq=seq, steps=1, memory=False)
    from adapters_lib import program_store
    from adapters_lib.train import step_programs

    first = {"jax_ready_s": t_jax, "weights_s": t_weights - t_jax, "build_to_first_loss_s": p["first_step_s"],
             "from_process_start_s": time.perf_counter() - t_start, "program_store": dict(program_store.stats)}
    # a launch in the running engine, weights held: the programs this process keeps (the
    # engine's next run of these shapes), then the program store read back (the first run of
    # these shapes in an engine that ran them before a restart)
    kept = train_point(model, base, batch=b, seq=seq, steps=1, memory=False)["first_step_s"]
    step_programs.forget()
    stored = train_point(model, base, batch=b, seq=seq, steps=1, memory=False)["first_step_s"]
    print(json.dumps({**first, "relaunch_kept_s": kept, "relaunch_store_s": stored,
                      "program_store_after": program_store.stats, "batch": b, "seq": seq}), flush=True)


def big(out: Path) -> list[dict]:
    """The Gemma-3-4B shape with LoRA on one chip: the largest batch at seq 2048 the estimate fits."""
    import jax

    from adapters_lib import memory as memory_lib

    model = shape_model("4b")
    base = random_params(model)
    seq = 128 if DRY else 2048
    dev = jax.devices()[0]
    limit = int((dev.memory_stats() or {}).get("bytes_limit") or 0)
    rows = []
    tried = []
    for batch, remat in ((4, True), (2, True), (1, True)) if not DRY else ((2, False),):
        cfg = _config(batch, seq, remat=remat)
        est = memory_lib.estimate_run(cfg, model.config, device_count=1, device_bytes=limit,
                                      seq_len=seq, platform=dev.platform,
                                      ce_chunk_bytes=_ce_budget(dev, {}))
        tried.append((batch, remat, est.verdict if not callable(est.verdict) else est.verdict()))
        if limit and tried[-1][2] == "exceeds":
            continue
        try:
            p = train_point(model, base, batch=batch, seq=seq, steps=3 if DRY else 5, remat=remat)
            rows.append(_row("ours: LoRA step, Gemma-3-4B shape, one chip", estimate_verdicts=tried, **p))
            break
        except Exception as e:  # noqa: BLE001 - try the next smaller batch
            rows.append(_row("ours: Gemma-3-4B shape attempt", batch=batch, remat=remat,
                             error=f"{type(e).__name__}: {e}"[:600]))
    _dump(out, "big", rows)
    return rows


def decode(out: Path) -> list[dict]:
    """A/B decode at the 1B shape: ours (base and tuned in one batched computation) against two
    sequential ``gm.text.Sampler`` loops, greedy, the same prompts, tokens/s a side."""
    import jax
    from gemma import gm

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.models.loaded import LoadedModel
    from bench.ab_speed import measure_ab_speed

    path = os.environ.get("TOKENIZER", ".tpu/extra/tokenizer.model")
    if DRY:
        from adapters_lib.models.loader import load_model
        from bench.measures import _cfg

        loaded = load_model(_cfg().model, param_dtype="bfloat16")
    else:
        model = shape_model("1b")
        loaded = LoadedModel(model=model, params=random_params(model), source="random Gemma-3-1B shape",
                             tokenizer=gm.text.Gemma3Tokenizer(path=path), tokenizer_path=path)
    spec = LoraSpec(rank=16, alpha=32.0, targets=("all",))
    adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(1))
    adapters = jax.tree.map(lambda x: x + 0.01, adapters)  # a tuned side that differs from the base
    prompts = ["Write a short story about a lighthouse keeper.", "Explain how a bicycle stays upright.",
               "List five uses of a paperclip.", "What should I pack for a week of hiking?"]
    new = 16 if DRY else 128
    r = measure_ab_speed(loaded, spec, adapters, prompts, max_new_tokens=new, repeats=2 if DRY else 3,
                         ref_cache_length=1024)
    rows = [_row("A/B decode, Gemma-3-1B shape", per_side_ours=r["ours_tokens_per_s"] / 2,
                 per_side_ref=r["ref_tokens_per_s"] / 2, **r)]
    _dump(out, "decode", rows)
    return rows


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
    b, seq = (2, 128) if DRY else (4, 1024)
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
    while any(not f.done() for f in pending) and meanwhile < 2000:
        (state, _), dt = timed(fns.train_step, state, few)
        meanwhile += 1
        wide_s.append(dt)
    concurrent.futures.wait(pending)
    behind_s = time.perf_counter() - t0
    own = []
    for _ in range(8):
        (state, _), dt = timed(fns.train_step, state, few)
        own.append(dt)
    _, eval_s = timed(fns.eval_step, state.params, few)
    row = _row("compile behind, Gemma-3-270M shape" if not DRY else "compile behind (dry)",
               batch=b, seq=seq, slots_every=every.slots, slots_few=few.slots,
               eval_compiles_started=len(eval_started), first_step_s=first_s, few_first_call_s=few_first_s,
               steps_run_while_compiling=meanwhile, until_own_ready_s=behind_s,
               wide_step_s=statistics.median(wide_s) if wide_s else None, own_step_s=statistics.median(own[2:]),
               first_eval_s=eval_s, ran_own=("train", (b, seq), few.slots) in fns._compiled)
    _dump(out, "behind", [row])
    return [row]


def memory(out: Path) -> list[dict]:
    # the 1B shape at seq 2048, batch 2/4/8, remat off and on (6 compiles of ~1-1.5 min: one
    # device call; batch 8 without remat is XLA's refusal, whose figure is read); the whole
    # default set (270M, 1B, 4B) is ~20 compiles: `python -m bench.memory_fit` there by hand.
    # --dry: the demo on the CPU
    cmd = [sys.executable, "-m", "bench.memory_fit", "--out", str(out / "memory_fit.json")] + (
        ["--models", "demo", "--batches", "2", "--seq", "128", "--remat", "off"] if DRY
        else ["--models", "1b", "--batches", "2", "4", "8", "--remat", "both"])
    res = subprocess.run(cmd, check=False)
    return [_row("memory_fit", returncode=res.returncode)]


def main(argv: list[str] | None = None) -> int:
    global DRY
    p = argparse.ArgumentParser(prog="python -m bench.tpu_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=("speed", "ce", "ratio", "first-step", "first-step-once", "big", "decode", "memory",
                                    "behind"))
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/tpu-out"))
    p.add_argument("--dry", action="store_true", help="the demo model's shape on this machine's CPU")
    a = p.parse_args(argv)
    DRY = a.dry
    if not DRY:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from adapters_lib import tf_deferred

    tf_deferred.install()
    out = Path(a.out)
    fn = {"speed": speed, "ce": ce, "ratio": ratio, "first-step": first_step, "big": big, "decode": decode, "memory": memory,
          "behind": behind}.get(a.name)
    if fn is None:
        first_step_once()
        return 0
    t = time.perf_counter()
    fn(out)
    _log(f"{a.name} took {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
