"""The measures: each returns ``Row``s comparing ours with a reference, side by side.

Registered in ``MEASURES`` (name → function(quick) → list[Row]); see ``python -m bench --help``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.report import Row, check, median_alternating

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MEASURES: dict[str, Callable[..., list[Row]]] = {}
NOT_QUICK: set[str] = set()
"""Measures ``--quick`` leaves out (their rows stay, with the date that measured them): the
demo-model twins of the real-270M rows, and the Keras route's row (reported, no target).
``python -m bench`` and ``--only NAME`` run them."""


def measure(name: str, *, quick: bool = True):
    def register(fn):
        MEASURES[name] = fn
        if not quick:
            NOT_QUICK.add(name)
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


@measure("train_random", quick=False)  # real-270M twin: real_270m.py
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


@measure("train_gsm8k", quick=False)  # real-270M twin: real_270m.py
def train_gsm8k(quick: bool = False) -> list[Row]:
    """Useful (loss-bearing) tokens/s on GSM8K chat: ours (packing, no per-step sync) vs ref-gemma."""
    import jax

    from adapters_lib.data import build_pipeline
    from adapters_lib.models.loader import load_model
    from bench.refs import RefGemmaTrainer, ref_chat_batches

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
    ref_batches, ref_useful = ref_chat_batches(loaded.tokenizer, _gsm8k_examples(b * n_steps), b, n_steps,
                                               max_len)
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


def ref_step_memory(model, abstract_base, b: int, length: int) -> dict:
    """Compiled memory of the reference step (``gm.nn.LoRA`` r8 + adamw, full logits, no remat)
    for ``model`` at batch ``b`` × ``length``: XLA's memory analysis, nothing runs."""
    import jax
    import jax.numpy as jnp
    import optax
    from gemma import gm, peft

    from adapters_lib.train.compiled_steps import memory_of

    tokens = jnp.zeros((1, 8), jnp.int32)
    ref_model = gm.nn.LoRA(rank=8, model=model, dtype=jnp.float32)
    full = jax.eval_shape(lambda r: ref_model.init(r, tokens)["params"], jax.random.key(0))
    _, ref_lora = peft.split_params(full)
    ref_lora = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.float32), ref_lora)
    ref_base = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), abstract_base)
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
    return memory_of(jax.jit(step, donate_argnums=(0, 1)).lower(ref_lora, opt_state, ref_base, tk, mk).compile())


@measure("memory_270m", quick=False)  # real-270M twin: real_270m.py
def memory_270m(quick: bool = False) -> list[Row]:
    """Peak memory of one compiled LoRA step at the Gemma-3-270M shape (compiled analysis only)."""
    import jax
    import jax.numpy as jnp
    from gemma import gm

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

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
    ref = ref_step_memory(model, base, b, length)
    note = (f"Gemma3-270M shape (vocab 262,144), batch {b}×{length}, bf16 weights, LoRA r8 all targets; "
            f"ours: chunked CE + remat (temp {ours['temp'] / 2**30:.2f} GiB); "
            f"ref: full logits, no remat (temp {ref['temp'] / 2**30:.2f} GiB)")
    rows.append(_row("peak step memory (270M shape)", ours["total"] / 2**30, ref["total"] / 2**30,
                     unit="GiB", target="≤ 0.6×", ref_name="ref-gemma", note=note))
    return rows


def _quiet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# --------------------------------------------------------------------------- generation


@measure("ab_pair", quick=False)  # real-270M twin: real_270m.py
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


@measure("keras_train", quick=False)  # reported, no target: python -m bench runs it
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
