"""The real Gemma 3 270M (the starter GGUF): every row side by side in one process, one load.

``python -m bench --quick --only real_270m_load real_270m_train …`` (the load is shared). Rows: GGUF load-to-ready (with the
load's host memory), LoRA train tokens/s f32 and bf16 against ref-gemma (``bench/refs.py``:
``gm.nn.LoRA`` + optax + ``jax.jit``, full logits), GSM8K useful tokens/s against ref-gemma
(padding to the longest), logits only where the loss is against the full logits (ours both
sides), training attention (block-sparse; fused ``dot_product_attention``) against gemma's,
CPU MFU against the matmul peak measured in the same run, A/B pair against two
``gm.text.Sampler`` calls. Sizes are small (batch 1-2 × 512) so that the whole measure fits a
few minutes on 2 shared cores; the repetitions are in each row's note.
"""

from __future__ import annotations

import re
import resource
import time

import numpy as np

from bench.measures import (
    _cfg,
    _random_batch,
    _row,
    measure,
)
from bench.mfu import lora_step_flops
from bench.real_270m_steps import _ref_runner, _runner, _steps, _train_cfg
from bench.report import Row, median_alternating

STARTER = "starter:gemma-3-270m"


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _best_seconds(f, *args, reps: int) -> float:
    """The fastest of ``reps`` timed calls of a jitted ``f`` after one warm-up (a machine's
    practical peak is what it does when it gets the cores)."""
    f(*args).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(*args).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return best


def _peak(dtype, n: int = 2048, reps: int = 4) -> float:
    """Achieved TFLOP/s of one jitted n×n×n matmul in ``dtype`` (the machine's practical peak, now)."""
    import jax

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    return 2 * n**3 / _best_seconds(jax.jit(lambda x, y: x @ y), a, b, reps=reps) / 1e12


def _bandwidth(n: int = 2**27, reps: int = 4) -> float:
    """GB/s of one jitted elementwise pass over ``n`` float32 (read + write; 512 MiB each way),
    best of ``reps``: the host's memory bandwidth now. The reference's step, with its full
    [batch, seq, 262144] f32 logits, moves with it; ours (chunked) much less."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((n,), jnp.float32)
    return 8 * n / _best_seconds(jax.jit(lambda v: v * 1.5 + 1.0), x, reps=reps) / 1e9


def _load_row() -> tuple[Row, object]:
    import jax

    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    rss0 = _rss_gib()
    t = time.perf_counter()
    loaded = load_model(ModelSpec(source=STARTER))
    jax.block_until_ready(loaded.params)
    seconds, host_gib = time.perf_counter() - t, _rss_gib() - rss0
    row = Row(measure="GGUF load-to-ready (real 270M)", ours=seconds, unit="s",
              note=f"starter GGUF (Q4_K_M) → f32 params on the CPU, block_until_ready; host peak RSS "
                   f"+{host_gib:.2f} GiB over the process before it (the load path's own "
                   "host memory); no reference: reported")
    _LOADED["host_gib"] = host_gib
    return row, loaded


def _op_kind(name: str) -> str:
    """A profiled XLA:CPU op's kind: its fusion name without the number (``ynn_fusion.78`` → ``ynn_fusion``)."""
    return re.sub(r"[._]\d+$", "", name)


def _profile_shares(run_step, top: int = 400) -> tuple[float, list[tuple[str, float]]]:
    """(ms per step in the traced ops, [(op kind, share of them)]) from a ``jax.profiler`` trace of one step.

    On a CPU the matmuls are ``ynn_fusion`` (YNNPACK dots, with what XLA fused into them) or ``dot``;
    the rest are elementwise/reduction fusions and copies."""
    import collections
    import tempfile

    from bench.mfu import _profile_top_ops

    with tempfile.TemporaryDirectory() as logdir:
        ops = _profile_top_ops(run_step, logdir, n_steps=1, top=top)
    total = sum(ms for _, ms in ops) or 1.0
    kinds: collections.Counter = collections.Counter()
    for name, ms in ops:
        kinds[_op_kind(name)] += ms
    return total, [(k, ms / total) for k, ms in kinds.most_common(6)]


def _train_rows(loaded, quick: bool) -> list[Row]:
    """LoRA train tokens/s f32 and bf16 vs ref-gemma (random tokens), the CPU MFU of both, and
    where our step's time goes (a profile of one step of each)."""
    import jax
    import jax.numpy as jnp

    from bench.refs import RefGemmaTrainer

    b, seq, n_steps, reps = 1, 512, 1, (2 if quick else 5)
    rng = np.random.default_rng(0)
    batches = [_random_batch(rng, b, seq, loaded.config.num_embed) for _ in range(n_steps)]
    ref_batches = [(np.concatenate([x["tokens"], x["targets"][:, -1:]], 1), np.ones((b, seq + 1), np.int32))
                   for x in batches]
    rows, step_s, profiles = [], {}, {}
    dtypes = ("float32", "bfloat16")
    bandwidth = _bandwidth()
    for dtype in dtypes:
        params = loaded.params if dtype == "float32" else jax.tree.map(lambda x: x.astype(jnp.bfloat16),
                                                                       loaded.params)
        steps, state = _steps(_train_cfg(b, seq, dtype), loaded, params, seq)
        ours = _runner(steps, state, batches)
        # the reference computes in the model's dtype; its LoRA weights are gm.nn.LoRA's default
        # dtype (bf16) in the bf16 row — f32 LoRA weights there would promote every adapted
        # einsum's output, and so the whole reference step, to f32 — and f32 in the f32 row
        ref_model = loaded.model if dtype == "float32" else loaded.model.clone(dtype=jnp.bfloat16)
        ref = RefGemmaTrainer(model=ref_model, base_params=params, rank=8, dtype=jnp.dtype(dtype))
        reference = _ref_runner(ref, ref_batches)
        ours(), reference()  # compile
        med = median_alternating({"ours": ours, "ref": reference}, reps)
        step_s[dtype] = med["ours"] / n_steps
        profiles[dtype] = _profile_shares(lambda ours=ours: (ours(), {"loss": jnp.zeros(())})[1])
        tokens = n_steps * b * seq
        target = "≥ 1.5×" if dtype == "float32" else ""
        rows.append(_row(f"train tokens/s (real 270M, {'bf16' if dtype == 'bfloat16' else 'f32'})",
                         tokens / med["ours"], tokens / med["ref"], unit="tok/s", target=target,
                         ref_name="ref-gemma",
                         note=f"real weights, random tokens (loss on every position: both sides compute "
                              f"every logit), LoRA r8 all targets, {dtype} weights+compute (ours keeps f32 LoRA "
                              f"weights, cast per step; ref's LoRA weights {dtype}), batch {b}×{seq}, "
                              f"{n_steps} step × {reps} reps (median, alternating); host memory bandwidth "
                              f"{bandwidth:.1f} GB/s in this run (bench.real_270m._bandwidth: the reference, "
                              "with its full f32 logits, is the side that moves with it)"))
        del steps, state, ref
    flops = lora_step_flops(loaded.config, batch=b, seq=seq)
    peaks = {label: _peak(jnp.dtype(dt)) for dt, label in (("bfloat16", "bf16"), ("float32", "f32"))}
    for dtype in dtypes:
        label = "bf16" if dtype == "bfloat16" else "f32"
        achieved = flops / step_s[dtype] / 1e12
        mfu = 100 * achieved / peaks["bf16"]
        traced, shares = profiles[dtype]
        where = ", ".join(f"{kind} {100 * share:.0f} %" for kind, share in shares)
        rows.append(Row(measure=f"CPU MFU, real-270M LoRA step ({label})", ours=mfu, unit="% of bf16 peak",
                        target="≥ 40 %", met=mfu >= 40,
                        note=f"{achieved * 1e3:.1f} GFLOP/s achieved ({flops / 1e12:.3f} TFLOP/step, "
                             f"{step_s[dtype]:.2f} s/step, batch {b}×{seq}) against {peaks['bf16'] * 1e3:.1f} "
                             f"GFLOP/s of a bf16 2048³ matmul measured in this run (best of 4; f32: "
                             f"{peaks['f32'] * 1e3:.1f} GFLOP/s, {100 * achieved / peaks['f32']:.0f} % of it); "
                             "model FLOPs only (bench.mfu.lora_step_flops: every logit, as random "
                             f"tokens need); profile of one step ({traced / 1e3:.2f} s in XLA ops; ynn_fusion "
                             f"= the matmuls): {where}"))
    return rows


def _gsm8k_rows(loaded, quick: bool) -> list[Row]:
    from bench.real_270m_gsm8k import gsm8k_rows

    return gsm8k_rows(loaded, quick, "float32")


def _gsm8k_bf16_rows(loaded, quick: bool) -> list[Row]:
    from bench.real_270m_gsm8k import gsm8k_rows

    return gsm8k_rows(loaded, quick, "bfloat16")


def _attention_rows(loaded, quick: bool) -> list[Row]:
    """One attention layer of the 270M (real layer-0 weights), forward + backward to its input."""
    import jax
    import jax.numpy as jnp
    from gemma.gm.nn import _modules

    from adapters_lib.train import attention
    from adapters_lib.train import loss as loss_lib

    c = loaded.config
    b, seq, reps = 1, 1024, (5 if quick else 9)
    rows = []
    x = jax.random.normal(jax.random.key(0), (b, seq, c.embed_dim), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(seq), (b, seq))
    mask = loss_lib.attention_mask(jnp.ones((b, seq), jnp.int32))
    for attn_type, name in ((_modules.AttentionType.LOCAL_SLIDING, f"sliding window {c.sliding_window_size}"),
                            (_modules.AttentionType.GLOBAL, "global")):
        m = _modules.Attention(num_heads=c.num_heads, num_kv_heads=c.num_kv_heads, features=c.embed_dim,
                               head_dim=c.head_dim, attn_type=attn_type,
                               query_pre_attn_scalar=c.query_pre_attn_scalar(),
                               rope_base_frequency=c.local_base_frequency if name != "global"
                               else c.global_base_frequency, rope_scale_factor=1.0,
                               attn_logits_soft_cap=c.attn_logits_soft_cap,
                               sliding_window_size=c.sliding_window_size, use_qk_norm=c.use_qk_norm)
        params = {"params": loaded.params["layer_0"]["attn"]}

        def fn(kind, m=m, params=params):
            def loss(xx):
                if kind is None:
                    return jnp.sum(m.apply(params, xx, pos, None, mask)[1])
                with attention.training_attention(kind):
                    return jnp.sum(m.apply(params, xx, pos, None, mask)[1])
            g = jax.jit(jax.grad(loss))
            g(x).block_until_ready()

            def run() -> float:
                t = time.perf_counter()
                g(x).block_until_ready()
                return time.perf_counter() - t
            return run

        med = median_alternating({"gemma": fn(None), "blocked": fn("blocked"), "xla": fn("xla")}, reps)
        for kind in ("blocked", "xla"):
            rows.append(_row(f"training attention, {kind} vs gemma's ({name}, real 270M)",
                             b * seq / med[kind], b * seq / med["gemma"], unit="tok/s", target="",
                             ref_name="gemma dense",
                             note=f"one 270M attention layer ({c.num_heads} heads, {c.num_kv_heads} kv, head "
                                  f"{c.head_dim}), batch {b}×{seq}, f32, forward + backward to the input; "
                                  f"{reps} reps; "
                                  + ("block-sparse scores (the CPU default)" if kind == "blocked" else
                                     "jax.nn.dot_product_attention implementation='xla' (the GPU default "
                                     "is 'cudnn': not measured here)")))
    return rows


def _ab_rows(loaded, quick: bool) -> list[Row]:
    """A/B pair tokens/s (one batched computation) vs two gm.text.Sampler calls."""
    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from bench.ab_speed import measure_ab_speed

    spec = LoraSpec(rank=8, alpha=16.0)
    adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(0))
    leaves, tree = jax.tree.flatten(adapters)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    adapters = jax.tree.unflatten(tree, [x + 0.01 * jax.random.normal(k, x.shape)
                                         for x, k in zip(leaves, keys, strict=True)])
    reps = 2 if quick else 5
    out = measure_ab_speed(loaded, spec, adapters, ["What is 3 plus 4?"], max_new_tokens=16 if quick else 32,
                           repeats=reps)
    return [_row("A/B pair tokens/s (real 270M, 1 prompt)", out["ours_tokens_per_s"], out["ref_tokens_per_s"],
                 unit="tok/s", target="≥ 1.8×", ref_name="ref-sampler ×2",
                 note=f"real weights, greedy, {out['max_new_tokens']} new tokens, f32; ref unpadded "
                      f"(pad_length=None); {reps} reps")]


def _memory_rows(loaded, quick: bool) -> list[Row]:
    """Peak step memory at batch 4×1024 on the real weights (XLA's compiled memory analysis of
    ours and of ref-gemma's step), with the GGUF load's own host memory beside it."""
    import jax
    import jax.numpy as jnp

    from bench.measures import ref_step_memory

    b, length = 4, 1024
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), loaded.params)
    cfg = _cfg(lora={"rank": 8, "alpha": 16.0, "targets": ["all"], "dtype": "float32"},
               train={"batch_size": b, "remat": True, "compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
               data={"max_length": length})
    steps, _ = _steps(cfg, loaded, params, length)
    ours = steps.compiled_memory((b, length))
    ref = ref_step_memory(loaded.model.clone(dtype=jnp.bfloat16), params, b, length)
    del steps, params
    load_note = f"host peak RSS +{_LOADED['host_gib']:.2f} GiB over the process before it"
    return [_row("peak step memory (real 270M)", ours["total"] / 2**30, ref["total"] / 2**30, unit="GiB",
                 target="≤ 0.0562×", ref_name="ref-gemma",
                 note=f"real weights (bf16), batch {b}×{length}, LoRA r8 all targets; compiled memory analysis "
                      f"of each step (weights, optimizer state, batch, temporaries); ours: chunked CE + remat "
                      f"(temp {ours['temp'] / 2**30:.2f} GiB); ref: full logits, no remat (temp "
                      f"{ref['temp'] / 2**30:.2f} GiB); target: no worse than the 270M-shape row's 0.0562×; "
                      f"GGUF load: {load_note}")]


_LOADED: dict = {}


def _loaded():
    """The one load of this process (the first measure that needs it times it)."""
    if "model" not in _LOADED:
        _LOADED["row"], _LOADED["model"] = _load_row()
    return _LOADED["model"]


@measure("real_270m_load")
def real_270m_load(quick: bool = False) -> list[Row]:
    """GGUF load-to-ready of the real 270M, and the load's host memory."""
    _loaded()
    return [_LOADED["row"]]


def _part(fn):
    def run(quick: bool = False) -> list[Row]:
        import gc

        rows = fn(_loaded(), quick)
        gc.collect()
        return rows
    run.__doc__ = fn.__doc__
    return run


MEASURE_PARTS = {"real_270m_attention": _attention_rows, "real_270m_train": _train_rows,
                 "real_270m_memory": _memory_rows,
                 "real_270m_ab": _ab_rows, "real_270m_gsm8k": _gsm8k_rows,
                 "real_270m_gsm8k_bf16": _gsm8k_bf16_rows}
for _name, _fn in MEASURE_PARTS.items():
    measure(_name)(_part(_fn))
