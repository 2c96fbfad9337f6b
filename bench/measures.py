"""The measures: each returns ``Row``s comparing ours with a reference, side by side.

Registered in ``MEASURES`` (name → function(quick) → list[Row]); see ``python -m bench --help``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.report import Row, check, median_alternating

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MEASURES: dict[str, Callable[..., list[Row]]] = {}


def measure(name: str):
    def register(fn):
        MEASURES[name] = fn
        return fn
    return register


def _row(measure_name: str, ours: float, ref: float, *, unit: str, target: str, ref_name: str,
         note: str = "", lower_is_better: bool = False) -> Row:
    ratio = ours / ref if ref else None
    return Row(measure=measure_name, ours=ours, reference=ref, unit=unit, target=target, ratio=ratio,
               met=check(ratio, target), ref_name=ref_name, note=note)


# --------------------------------------------------------------------------- training


def _cfg(**sections):
    from adapters_lib.config import config_from_dict

    raw = {"mesh": {"data": 1, "fsdp": 1, "tensor": 1, "devices": 1}}
    for k, v in sections.items():
        raw.setdefault(k, {}).update(v)
    return config_from_dict(raw)


def _ours_trainer(cfg, loaded, seq_len: int):
    import jax

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    trainable = lora.init_lora(loaded.model, cfg.lora, loaded.params, jax.random.key(0))
    steps = build_steps(loaded.model, cfg, make_optimizer(cfg.train), mesh, loaded.params, trainable,
                        seq_len=seq_len)
    return steps, steps.init_state(trainable)


def _random_batch(rng: np.random.Generator, b: int, length: int, vocab: int) -> dict[str, np.ndarray]:
    tokens = rng.integers(4, vocab, size=(b, length + 1), dtype=np.int32)
    return {
        "tokens": tokens[:, :-1], "targets": tokens[:, 1:],
        "loss_mask": np.ones((b, length), np.float32),
        "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (b, length)).copy(),
        "segment_ids": np.ones((b, length), np.int32),
    }


@measure("train_random")
def train_random(quick: bool = False) -> list[Row]:
    """Training tokens/s, demo model, fixed-length random tokens: ours vs ref-gemma."""
    import jax

    from adapters_lib.models.loader import load_model
    from bench.refs import RefGemmaTrainer

    b, length, n_steps = 8, 128, (10 if quick else 20)
    reps = 5
    cfg = _cfg(lora={"rank": 8, "alpha": 8.0, "targets": ["all"]},
               train={"batch_size": b, "learning_rate": 1e-3, "schedule": "constant", "warmup_steps": 0,
                      "clip_norm": 0.0},
               data={"max_length": length})
    loaded = load_model(cfg.model, param_dtype="float32")
    steps, state = _ours_trainer(cfg, loaded, length)
    ref = RefGemmaTrainer(model=loaded.model, base_params=loaded.params, rank=8)
    rng = np.random.default_rng(0)
    batches = [_random_batch(rng, b, length, loaded.config.num_embed) for _ in range(4)]
    dev_batches = [steps.put_batch(x) for x in batches]
    ref_batches = [(np.concatenate([x["tokens"], x["targets"][:, -1:]], 1),
                    np.ones((b, length + 1), np.int32)) for x in batches]
    holder = {"state": state}

    def ours() -> float:
        t = time.perf_counter()
        st = holder["state"]
        for i in range(n_steps):
            st, metrics = steps.train_step(st, dev_batches[i % 4])
        jax.block_until_ready(metrics["loss"])
        holder["state"] = st
        return time.perf_counter() - t

    def reference() -> float:
        t = time.perf_counter()
        for i in range(n_steps):
            ref.step(*ref_batches[i % 4])
        return time.perf_counter() - t

    ours(), reference()  # warm-up (compiles)
    med = median_alternating({"ours": ours, "ref": reference}, reps)
    tokens = n_steps * b * length
    note = (f"demo model, LoRA r8 all targets (ours {cfg.lora.targets}; ref gm.nn.LoRA every einsum), "
            f"f32, batch {b}×{length}, {n_steps} steps × {reps}")
    return [_row("train tokens/s (random, demo)", tokens / med["ours"], tokens / med["ref"], unit="tok/s",
                 target="≥ 1.15×", ref_name="ref-gemma", note=note)]


def _gsm8k_examples(limit: int) -> list[dict]:
    import json

    path = SHARED_DATA / "gsm8k" / "train.jsonl"
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            out.append({"messages": [{"role": "user", "content": row["question"]},
                                     {"role": "assistant", "content": row["answer"]}]})
            if len(out) >= limit:
                break
    return out


@measure("train_gsm8k")
def train_gsm8k(quick: bool = False) -> list[Row]:
    """Useful (loss-bearing) tokens/s on GSM8K chat: ours (packing, no per-step sync) vs ref-gemma."""
    import jax

    from adapters_lib.data import build_pipeline
    from adapters_lib.data.chat_template import segments
    from adapters_lib.models.loader import load_model
    from bench.refs import RefGemmaTrainer, pad_to_longest

    if not (SHARED_DATA / "gsm8k" / "train.jsonl").is_file():
        return [Row(measure="useful tokens/s (GSM8K chat)", note="skipped: ../shared/data/gsm8k missing")]
    b, max_len, n_steps, reps = 8, 512, (6 if quick else 12), 5
    cfg = _cfg(lora={"rank": 8, "alpha": 8.0, "targets": ["all"]},
               train={"batch_size": b, "learning_rate": 1e-3, "schedule": "constant", "warmup_steps": 0},
               data={"path": str(SHARED_DATA / "gsm8k" / "train.jsonl"), "format": "qa",
                     "max_length": max_len, "packing": True, "eval_fraction": 0.0})
    loaded = load_model(cfg.model, param_dtype="float32")
    pipe = build_pipeline(cfg.data, loaded.tokenizer, batch_size=b, seed=0)
    steps, state = _ours_trainer(cfg, loaded, max_len)
    our_batches = [pipe.train_batch(i) for i in range(n_steps)]
    our_useful = sum(float(x["loss_mask"].sum()) for x in our_batches)
    dev_batches = [steps.put_batch(x) for x in our_batches]

    # reference: the same examples, chat template, loss on the answer, padded to the longest
    sp = loaded.tokenizer
    exs = _gsm8k_examples(b * n_steps)
    ref_batches, ref_useful = [], 0.0
    for i in range(n_steps):
        toks, masks = [], []
        for ex in exs[i * b:(i + 1) * b]:
            ids, m = [2], [0]
            for text, counts in segments(ex["messages"]):
                piece = sp.encode(text)
                ids += piece
                m += [int(counts)] * len(piece)
            toks.append(ids[:max_len])
            masks.append(m[:max_len])
        t, mk = pad_to_longest(toks, masks)
        ref_batches.append((t, mk))
        ref_useful += float(mk[:, 1:].sum())
    ref = RefGemmaTrainer(model=loaded.model, base_params=loaded.params, rank=8)
    holder = {"state": state}

    def ours() -> float:
        t = time.perf_counter()
        st = holder["state"]
        for x in dev_batches:
            st, metrics = steps.train_step(st, x)
        jax.block_until_ready(metrics["loss"])
        holder["state"] = st
        return time.perf_counter() - t

    def reference() -> float:
        t = time.perf_counter()
        for tk, mk in ref_batches:
            ref.step(tk, mk)
        return time.perf_counter() - t

    ours(), reference()  # warm-up: ours compiles once; the reference compiles per padded width
    med = median_alternating({"ours": ours, "ref": reference}, reps)
    note = (f"demo model, LoRA r8, f32, {n_steps} steps × batch {b}; ours packs to {max_len} "
            f"(useful {our_useful:.0f} tok), ref pads to the longest (useful {ref_useful:.0f} tok)")
    return [_row("useful tokens/s (GSM8K chat)", our_useful / med["ours"], ref_useful / med["ref"],
                 unit="tok/s", target="≥ 2×", ref_name="ref-gemma", note=note)]


@measure("memory_270m")
def memory_270m(quick: bool = False) -> list[Row]:
    """Peak memory of one compiled LoRA step at the Gemma-3-270M shape (compiled analysis only)."""
    import jax
    import jax.numpy as jnp
    import optax
    from gemma import gm, peft

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps, memory_of

    b, length = 4, 1024
    model = gm.nn.Gemma3_270M(dtype=jnp.bfloat16, text_only=True) if "text_only" in gm.nn.Gemma3_270M.__dataclass_fields__ \
        else gm.nn.Gemma3_270M(dtype=jnp.bfloat16)
    tokens = jnp.zeros((1, 8), jnp.int32)
    base = jax.eval_shape(lambda r: model.init(r, tokens)["params"], jax.random.key(0))
    rows = []
    cfg = _cfg(lora={"rank": 8, "alpha": 16.0, "targets": ["all"], "dtype": "float32"},
               train={"batch_size": b, "remat": True, "compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
               data={"max_length": length})
    spec = cfg.lora
    abstract_lora = jax.eval_shape(
        lambda r: lora.split_lora(lora.wrap(model, spec).init(r, tokens)["params"])[1], jax.random.key(0))
    abstract_lora = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32), abstract_lora)
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    steps = build_steps(model, cfg, make_optimizer(cfg.train), mesh,
                        jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), base), abstract_lora,
                        seq_len=length)
    ours = steps.compiled_memory((b, length))

    # reference: gm.nn.LoRA + adamw, full logits, no remat, same dtypes
    ref_model = gm.nn.LoRA(rank=8, model=model, dtype=jnp.float32)
    full = jax.eval_shape(lambda r: ref_model.init(r, tokens)["params"], jax.random.key(0))
    ref_base, ref_lora = peft.split_params(full)
    ref_lora = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32), ref_lora)
    opt = optax.adamw(1e-4)

    def loss_fn(lo, bs, tk, mk):
        logits = ref_model.apply({"params": peft.merge_params(bs, lo)}, tk[:, :-1]).logits
        ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), tk[:, 1:])
        return jnp.sum(ce * mk[:, 1:]) / jnp.sum(mk[:, 1:])

    def step(lo, st, bs, tk, mk):
        loss, g = jax.value_and_grad(loss_fn)(lo, bs, tk, mk)
        up, st = opt.update(g, st, lo)
        return optax.apply_updates(lo, up), st, loss

    opt_state = jax.eval_shape(opt.init, ref_lora)
    tk = jax.ShapeDtypeStruct((b, length + 1), jnp.int32)
    mk = jax.ShapeDtypeStruct((b, length + 1), jnp.float32)
    ref = memory_of(jax.jit(step, donate_argnums=(0, 1)).lower(ref_lora, opt_state, ref_base, tk, mk).compile())
    note = (f"Gemma3-270M shape (vocab 262,144), batch {b}×{length}, bf16 weights, LoRA r8 all targets; "
            f"ours: chunked CE + remat (temp {ours['temp'] / 2**30:.2f} GiB); "
            f"ref: full logits, no remat (temp {ref['temp'] / 2**30:.2f} GiB)")
    rows.append(_row("peak step memory (270M shape)", ours["total"] / 2**30, ref["total"] / 2**30,
                     unit="GiB", target="≤ 0.6×", ref_name="ref-gemma", note=note))
    return rows


def _quiet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# --------------------------------------------------------------------------- generation


@measure("ab_pair")
def ab_pair(quick: bool = False) -> list[Row]:
    """A/B pair tokens/s (one batched computation) vs two sequential gm.text.Sampler calls."""
    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.models.loader import load_model
    from bench.ab_speed import measure_ab_speed

    cfg = _cfg()
    loaded = load_model(cfg.model, param_dtype="float32")
    spec = LoraSpec(rank=8, alpha=16.0)
    adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(0))
    leaves, tree = jax.tree.flatten(adapters)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    adapters = jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape)
                                         for x, k in zip(leaves, keys, strict=True)])
    rows = []
    prompts = ["Is 17 even or odd?", "Reverse the words: apple river stone",
               "What is 3 plus 4?", "Sort the letters: d a c b"]
    for n in ((1,) if quick else (1, 4)):
        out = measure_ab_speed(loaded, spec, adapters, prompts[:n], max_new_tokens=32 if quick else 64,
                               repeats=5)
        rows.append(_row(f"A/B pair tokens/s ({n} prompt{'s' if n > 1 else ''})", out["ours_tokens_per_s"],
                         out["ref_tokens_per_s"], unit="tok/s", target="≥ 1.6×",
                         ref_name="ref-sampler ×2",
                         note=f"demo, greedy, {out['max_new_tokens']} new tokens; ref unpadded (pad_length=None)"))
    return rows


# --------------------------------------------------------------------------- keras route


@measure("keras_train")
def keras_train(quick: bool = False) -> list[Row]:
    """Training tokens/s: ours (gemma route) vs the Keras route (keras-hub + enable_lora + fit)."""
    from adapters_lib.config import config_from_dict
    from adapters_lib.keras_route.throughput import train_tokens_per_s

    b, length = 8, 128
    common = {"lora": {"rank": 8, "alpha": 8.0, "targets": ["all"]},
              "train": {"batch_size": b, "schedule": "constant", "warmup_steps": 0},
              "data": {"max_length": length}}
    kcfg = config_from_dict({**common, "model": {"backend": "keras"},
                             "mesh": {"data": 1, "fsdp": 1, "tensor": 1, "devices": 1}})
    keras = train_tokens_per_s(kcfg, steps=10 if quick else 20)
    ours = train_random(quick=quick)[0]
    k = keras.get("tokens_per_s") or next(iter(keras.values()))
    return [_row("train tokens/s vs Keras route (demo)", ours.ours, float(k), unit="tok/s", target="",
                 ref_name="ref-keras", note="reported, no target; LoRA r8 all targets, f32, batch 8×128, 1 device")]


# --------------------------------------------------------------------------- memory estimate


@measure("memory_estimate")
def memory_estimate(quick: bool = False) -> list[Row]:
    """Memory-estimate error vs the compiled step's own analysis, for 3 configs."""
    from adapters_lib import memory
    from adapters_lib.models.loader import load_model
    from bench.report import Row as _Row

    configs = {
        "LoRA r8, f32": {},
        "LoRA r16, remat": {"lora": {"rank": 16}, "train": {"remat": True}},
        "full fine-tune": {"lora": {"enabled": False}},
    }
    rows = []
    for name, extra in configs.items():
        sections = {"train": {"batch_size": 8}, "data": {"max_length": 128}}
        for k, v in extra.items():
            sections.setdefault(k, {}).update(v)
        cfg = _cfg(**sections)
        loaded = load_model(cfg.model, param_dtype="float32")
        steps, _ = _ours_trainer(cfg, loaded, 128) if cfg.lora.enabled else _full_trainer(cfg, loaded)
        compiled = steps.compiled_memory((8, 128))["total"]
        est = memory.estimate_run(cfg, loaded.config, device_count=1).total
        err = abs(est - compiled) / compiled
        rows.append(_Row(measure=f"memory estimate error ({name})", ours=est / 2**20,
                         reference=compiled / 2**20, unit="MiB", target="≤ 15 %", ratio=est / compiled,
                         met=err <= 0.15, ref_name="compiled memory_analysis",
                         note=f"error {100 * err:.1f} %; demo model, batch 8×128"))
    return rows


def _full_trainer(cfg, loaded):
    import jax

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), jax.devices()[:1])
    steps = build_steps(loaded.model, cfg, make_optimizer(cfg.train), mesh, None, loaded.params, seq_len=128)
    return steps, None


# --------------------------------------------------------------------------- UI


def _tmux_first_frame(home: str, marker: str = "Models", timeout: float = 20.0) -> float:
    import shutil
    import subprocess

    if not shutil.which("tmux"):
        raise RuntimeError("tmux not found")
    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    sock = f"wb-bench-{os.getpid()}-{time.monotonic_ns()}"  # a fresh server each time
    env_cmd = f"env GEMMA_WORKBENCH_HOME={home} {exe}"
    t0 = time.perf_counter()
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "80", "-y", "24", env_cmd], check=True,
                   capture_output=True)
    try:
        while time.perf_counter() - t0 < timeout:
            screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p"], capture_output=True,
                                    text=True).stdout
            if marker in screen:
                return time.perf_counter() - t0
            time.sleep(0.01)
        raise RuntimeError("no first frame")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


@measure("ui_start")
def ui_start(quick: bool = False) -> list[Row]:
    """TUI cold start to first frame (tmux, 80×24); engine start to ready."""
    import statistics
    import subprocess
    import tempfile

    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    rows = []
    with tempfile.TemporaryDirectory() as home:
        _tmux_first_frame(home)  # warm the page cache
        times = [_tmux_first_frame(home) for _ in range(5)]
        rows.append(Row(measure="TUI cold start to first frame", ours=statistics.median(times), unit="s",
                        target="≤ 1.0 s", met=statistics.median(times) <= 1.0,
                        note="tmux 80×24, process start to 'Models' on screen, median of 5"))
        env = {**os.environ, "GEMMA_WORKBENCH_HOME": home}
        starts = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([exe, "engine", "start"], env=env, check=True, capture_output=True, timeout=120)
            starts.append(time.perf_counter() - t0)
            subprocess.run([exe, "engine", "stop", "--force"], env=env, capture_output=True, timeout=120)
        rows.append(Row(measure="engine start to ready", ours=statistics.median(starts), unit="s",
                        note="`gemma-workbench engine start` until it answers, median of 3 (reported)"))
    return rows


@measure("ui_overhead")
def ui_overhead(quick: bool = False) -> list[Row]:
    """Training tokens/s with a client following the run's live stream vs no client."""
    import statistics
    import subprocess
    import tempfile
    import threading

    steps = 40 if quick else 80
    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    overrides = [f"train.steps={steps}", "train.eval_every=1000", "train.checkpoint_every=1000",
                 "train.eval_exact_match=0", "mesh.devices=1", "mesh.data=1", "mesh.fsdp=1",
                 "mesh.tensor=1", "data.max_length=128", "train.batch_size=8"]
    with tempfile.TemporaryDirectory() as home:
        old = os.environ.get("GEMMA_WORKBENCH_HOME")
        os.environ["GEMMA_WORKBENCH_HOME"] = home
        try:
            from workbench.client import EngineClient

            client = EngineClient.connect()

            def one(follow: bool) -> float:
                run = client.create_run(config_toml="", overrides=overrides, source="bench")
                stop = threading.Event()
                seen = [0]

                def follower():
                    with EngineClient.connect() as c:
                        for item in c.stream_run(run["id"]):
                            seen[0] += 1
                            if stop.is_set() or item.get("type") == "end":
                                return

                th = threading.Thread(target=follower, daemon=True) if follow else None
                if th:
                    th.start()
                client.wait_run(run["id"], timeout=900)
                stop.set()
                metrics = client.get_run(run["id"])["metrics"]
                rates = [m["tokens_per_s"] for m in metrics if m.get("step", 0) > 5 and m.get("tokens_per_s")]
                return statistics.median(rates)

            one(False)  # warm-up: compiles (the engine keeps the compile cache)
            pairs = [(one(True), one(False)) for _ in range(2 if quick else 3)]
        finally:
            subprocess.run([exe, "engine", "stop", "--force"], capture_output=True, timeout=120)
            if old is None:
                os.environ.pop("GEMMA_WORKBENCH_HOME", None)
            else:
                os.environ["GEMMA_WORKBENCH_HOME"] = old
    attached = statistics.median(p[0] for p in pairs)
    alone = statistics.median(p[1] for p in pairs)
    return [_row("train tokens/s, live stream attached vs none", attached, alone, unit="tok/s",
                 target="≥ 0.97×", ref_name="no client",
                 note=f"engine process, demo, {steps} steps × {len(pairs)} pairs; a client follows the SSE stream")]


# --------------------------------------------------------------------------- GPU


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

    from adapters_lib.memory import CE_CHUNK_BYTES

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
              f"FLOPs = bench.measures.lora_step_flops")))
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
