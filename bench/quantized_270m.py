"""The quantized frozen base (``[model] quantize``) on the real Gemma 3 270M.

- ``quantized_270m_memory``: the base's weights on the device (the device's own byte count)
  and the compiled LoRA step's peak memory per mode against bf16, on the real 270M and on the
  Gemma-3-1B shape (abstract weights: the layout's bytes, no 1B file here, so no gguf row);
- ``quantized_270m_ppl``: base perplexity on held-out text (the same 512-token windows for
  every side), each mode against f32, and f32/gguf against llama.cpp on the same GGUF file;
- ``quantized_270m_ab``: the A/B pair's tokens/s (base and tuned sides in one batched
  computation, greedy) with an int8 base against bf16 and f32, and against llama.cpp
  generating from the same GGUF (one sequence).
- ``quantized_270m_lora`` (bench/quantized_lora.py): the same LoRA run on an nf4 base and on
  a bf16 base.

Not in ``--quick``: each compiles the 270M's programs once per mode.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

from bench.measures import SHARED_DATA, measure
from bench.report import Row

STARTER = "starter:gemma-3-270m"
MODES = ("int8", "int4", "nf4")
VARIANTS = (  # (label, quantize, tile, quantize_embedding)
    ("int8", "int8", 64, "auto"), ("int4", "int4", 64, "auto"), ("nf4", "nf4", 64, "auto"),
    ("nf4 t32", "nf4", 32, "auto"), ("nf4 t32, int8 table", "nf4", 32, "int8"), ("gguf", "gguf", 64, "auto"))
TARGETS = {"int8": ("≤ 0.55×", "", "≤ 1.005×"), "int4": ("≤ 0.3×", "≤ 0.5×", "≤ 1.03×"),
           "nf4": ("≤ 0.3×", "≤ 0.5×", "≤ 1.03×")}
"""mode → (weights, peak LoRA step, perplexity) targets against bf16/bf16/f32."""
LLAMA_CPP = Path.home() / ".cache" / "gemma-workbench" / "llama-cpp"


GPTQ_VARIANTS = (  # (label, quantize, tile, quantize_embedding): quantize_method = "gptq"
    ("nf4 gptq", "nf4", 64, "auto"), ("int4 gptq", "int4", 64, "auto"),
    ("nf4 gptq, float table", "nf4", 64, "none"), ("nf4 gptq, int8 table", "nf4", 64, "int8"))
"""Calibrated on Shakespeare's text before the held-out part (``_calibration_file``)."""


def _load(param_dtype: str = "float32", quantize: str = "none", tile: int = 64, table: str = "auto",
          calibration: str = ""):
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec(source=STARTER, quantize=quantize, quantize_tile_size=tile,
                                quantize_embedding=table, quantize_method="gptq" if calibration else "rtn",
                                quantize_calibration=calibration), param_dtype=param_dtype)


def _calibration_file(folder: str) -> str:
    """Shakespeare without its last 6,000 characters (the held-out text), as a .txt source."""
    path = Path(folder) / "shakespeare-head.txt"
    path.write_text((SHARED_DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")[:-6000], encoding="utf-8")
    return str(path)


def _ratio_row(name: str, ours: float, ref: float, *, unit: str, target: str, ref_name: str,
               note: str) -> Row:
    from bench.measures import _row

    return _row(name, ours, ref, unit=unit, target=target, ref_name=ref_name, note=note)


def _step_peak(model, params, quantize: str, tile: int, table: str, b: int, length: int) -> int:
    """The compiled LoRA step's memory (bytes, XLA's analysis) on ``params`` (arrays or shapes)."""
    import jax

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import config_from_dict
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    cfg = config_from_dict({"mesh": {"data": 1, "fsdp": 1, "tensor": 1, "devices": 1},
                            "model": {"quantize": quantize, "quantize_tile_size": tile,
                                      "quantize_embedding": table},
                            "lora": {"rank": 8, "targets": ["all"], "dtype": "float32"},
                            "train": {"batch_size": b, "remat": True, "param_dtype": "bfloat16",
                                      "compute_dtype": "bfloat16"},
                            "data": {"max_length": length}})
    mesh = mesh_lib.make_mesh(cfg.mesh, jax.devices()[:1])
    adapters = jax.eval_shape(lambda: lora.init_lora(model, cfg.lora, params, jax.random.key(0)))
    adapters = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), adapters)
    steps = build_steps(model, cfg, make_optimizer(cfg.train), mesh, params, adapters)
    return steps.compiled_memory((b, length))["total"]


def _layout_bytes(tree) -> int:
    """Bytes of a tree of arrays or shapes as the device packs them (int4/uint4: half a byte)."""
    import jax
    import jax.numpy as jnp

    total = 0
    for x in jax.tree.leaves(tree):
        bits = 4 if x.dtype in (jnp.int4, jnp.uint4) else 8 * jnp.dtype(x.dtype).itemsize
        total += math.ceil(x.size * bits / 8)
    return total


def _gemma3_1b(quantize: str, tile: int, table: str):
    """(model, abstract params) of the Gemma-3-1B shape held as ``quantize`` (no weights)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models import families
    from adapters_lib.models import quantize as quantize_lib
    from adapters_lib.models.weights import abstract_params

    arch = families.KNOWN[("gemma3", "1b")][1]
    model = families.model_class(arch)(dtype=jnp.bfloat16)
    params = abstract_params(arch, "bfloat16")
    if quantize == "none":
        return model, params
    held = jax.eval_shape(lambda p: quantize_lib.quantize_params(p, quantize, tile, config=model.config,
                                                                 table=table), params)
    return quantize_lib.with_quantized_base(model), held


@measure("quantized_270m_memory", quick=False)
def quantized_270m_memory(quick: bool = False) -> list[Row]:
    """Weights on the device and peak LoRA step memory per ``quantize`` mode vs bf16."""
    from adapters_lib.models import quantize

    b, length = 2, 256
    rows, weights, peaks = [], {}, {}
    for label, mode, tile, table in (("bf16", "none", 64, "auto"), *VARIANTS):
        loaded = _load("bfloat16", mode, tile, table)
        weights[label] = quantize.device_bytes(loaded.params)
        peaks[label] = _step_peak(loaded.model, loaded.params, mode, tile, table, b, length)
        del loaded
    one_b = {}
    for label, mode, tile, table in (("bf16", "none", 64, "auto"), *VARIANTS[:3]):
        model, params = _gemma3_1b(mode, tile, table)
        one_b[label] = (_layout_bytes(params), _step_peak(model, params, mode, tile, table, b, length))
    note = (f"batch {b}×{length}, LoRA r8 all targets, remat, bf16 compute; scales bf16 "
            "(gguf: f32); tile 64 unless named")
    for label, mode, *_ in VARIANTS:
        w, p, _ = TARGETS.get(mode, ("", "", ""))
        if "table" in label:
            w = p = ""
        rows.append(_ratio_row(f"base weights on the device, {label} (real 270M)",
                               weights[label] / 2**20, weights["bf16"] / 2**20, unit="MiB",
                               target=w, ref_name="bf16 base",
                               note="on_device_size_in_bytes of every buffer; " + note))
        rows.append(_ratio_row(f"peak LoRA step memory, {label} base (real 270M)",
                               peaks[label] / 2**20, peaks["bf16"] / 2**20, unit="MiB",
                               target=p, ref_name="bf16 base", note="compiled memory analysis, " + note))
        if label in one_b:
            rows.append(_ratio_row(f"base weights, {label} (Gemma-3-1B shape)", one_b[label][0] / 2**20,
                                   one_b["bf16"][0] / 2**20, unit="MiB", target=w, ref_name="bf16 base",
                                   note="the layout's bytes (int4 packed, as the device counts it on "
                                        "the 270M); " + note))
            rows.append(_ratio_row(f"peak LoRA step memory, {label} base (Gemma-3-1B shape)",
                                   one_b[label][1] / 2**20, one_b["bf16"][1] / 2**20, unit="MiB",
                                   target=p, ref_name="bf16 base", note="compiled memory analysis, " + note))
    return rows


def _heldout_windows(tokenizer, length: int = 512) -> list[list[int]]:
    """The last 6,000 characters of Shakespeare (in none of our training configs), as windows
    of BOS and ``length`` tokens (each token after BOS is scored)."""
    text = (SHARED_DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")[-6000:]
    ids = tokenizer.encode(text)
    return [[2, *ids[i:i + length]] for i in range(0, len(ids), length)]


def _workbench_nll(loaded, windows: list[list[int]]) -> tuple[float, int]:
    """(Σ NLL, tokens) of each window's next tokens (the chunked cross-entropy eval uses)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.train import loss as loss_lib

    @jax.jit
    def nll(params, tokens):
        out = loaded.model.apply({"params": params}, tokens[:, :-1], return_hidden_states=True)
        hidden = out.hidden_states
        mask = jnp.ones(tokens[:, 1:].shape, jnp.float32)
        chunk = max(c for c in range(1, 65) if hidden.shape[1] % c == 0)
        return loss_lib.chunked_ce_sum(hidden, params["embedder"]["input_embedding"], tokens[:, 1:],
                                       mask, chunk=chunk, softcap=loaded.model.config.final_logit_softcap)

    total, count = 0.0, 0
    for w in windows:
        total += float(nll(loaded.params, jnp.asarray([w])))
        count += len(w) - 1
    return total, count


def _llama_cpp():
    """llama-cpp-python as ``scripts/build_llama_cpp.sh`` installs it (None: not built)."""
    if not LLAMA_CPP.is_dir():
        return None
    if str(LLAMA_CPP) not in sys.path:
        sys.path.insert(0, str(LLAMA_CPP))
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp


def _llama_rate(prompt: str, new: int, reps: int) -> float | None:
    """llama.cpp's tokens/s on the starter GGUF (its Q4_K_M blocks): one sequence, the
    chat-formatted ``prompt`` then ``new`` greedy tokens, prefill included as on our side (the
    median of ``reps``; None: not built). One thread: its threads spin, and 2 of them on 2
    shared cores decoded at 0.7 tok/s against 7.6 for one (load 9)."""
    import statistics

    from adapters_lib.models import starter
    from adapters_lib.sample.prompts import format_chat

    llama_cpp = _llama_cpp()
    if llama_cpp is None:
        return None
    model = llama_cpp.Llama(str(starter.ensure_starter()), n_ctx=256, n_batch=32, n_ubatch=32,
                            n_threads=1, verbose=False)
    tokens = model.tokenize(format_chat([{"role": "user", "content": prompt}]).encode(),
                            add_bos=True, special=True)

    def run() -> int:
        model.reset()
        for n, _ in enumerate(model.generate(tokens, top_k=1, temp=0.0, reset=True), start=1):
            if n == new:
                return n
        return new

    run()  # warm
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        n = run()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def _llama_nll(gguf_path: str, windows: list[list[int]]) -> tuple[float, int] | None:
    """(Σ NLL, tokens) under llama.cpp on the same file and token windows (None: not built)."""
    import numpy as np

    llama_cpp = _llama_cpp()
    if llama_cpp is None:
        return None
    model = llama_cpp.Llama(gguf_path, n_ctx=max(len(w) for w in windows), n_batch=32, n_ubatch=32, n_threads=1,
                            logits_all=True, verbose=False)
    total, count = 0.0, 0
    for w in windows:
        model.reset()
        model.eval(w)
        logits = np.asarray(model.scores[:len(w) - 1], np.float64)
        top = logits.max(-1, keepdims=True)
        lse = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
        total += float(np.sum(lse - logits[np.arange(len(w) - 1), w[1:]]))
        count += len(w) - 1
    return total, count


@measure("quantized_270m_ppl", quick=False)
def quantized_270m_ppl(quick: bool = False) -> list[Row]:
    """Base perplexity on held-out text per mode vs f32, and vs llama.cpp on the same GGUF."""
    from adapters_lib.models import starter
    from adapters_lib.models.quantize import quantize_gptq

    f32 = _load("float32")
    windows = _heldout_windows(f32.tokenizer)
    nll = {"f32": _workbench_nll(f32, windows)}
    del f32
    for label, mode, tile, table in VARIANTS:
        loaded = _load("float32", mode, tile, table)
        nll[label] = _workbench_nll(loaded, windows)
        del loaded
    with tempfile.TemporaryDirectory() as tmp:
        calibration = _calibration_file(tmp)
        for label, mode, tile, table in GPTQ_VARIANTS:
            loaded = _load("float32", mode, tile, table, calibration)
            nll[label] = _workbench_nll(loaded, windows)
            del loaded
    ppl = {k: math.exp(t / n) for k, (t, n) in nll.items()}
    tokens = nll["f32"][1]
    note = (f"held-out Shakespeare (last 6,000 chars), {len(windows)} windows of BOS + ≤ 512, "
            f"{tokens} tokens scored")
    rows = []
    for label, mode, tile, table in (*VARIANTS, *GPTQ_VARIANTS):
        target = TARGETS[mode][2] if mode in TARGETS else "≤ 1.005×"
        detail = {"gguf": "the file's own blocks (Q8_0 table, Q5_0/Q6_K as int8, Q4_K as uint4 "
                          "+ offset, f32 scales)"}.get(mode, f"tile {tile}, table {table}, f32 scales")
        if "gptq" in label:
            detail += (f"; GPTQ on {quantize_gptq.CALIBRATION_ROWS} rows × {quantize_gptq.CALIBRATION_LENGTH} "
                       "tokens of the Shakespeare before the held-out part, act-order, scales searched")
        rows.append(_ratio_row(f"base perplexity, {label} (real 270M)", ppl[label], ppl["f32"],
                               unit="ppl", target=target, ref_name="f32 base", note=f"{note}; {detail}"))
    llama = _llama_nll(str(starter.ensure_starter()), windows)
    for label in ("f32", "gguf"):
        if llama is None:
            rows.append(Row(measure=f"base perplexity, {label} vs llama.cpp (real 270M)", ours=ppl[label],
                            unit="ppl", note=f"llama-cpp-python not built at {LLAMA_CPP}: "
                                             "scripts/build_llama_cpp.sh"))
            continue
        rows.append(_ratio_row(f"base perplexity, {label} vs llama.cpp (real 270M)", ppl[label],
                               math.exp(llama[0] / llama[1]), unit="ppl", target="",
                               ref_name="llama.cpp, same GGUF", note=f"{note}; llama.cpp runs the "
                               "Q4_K_M blocks with its own kernels (activations quantized to 8 bits)"))
    return rows


@measure("quantized_270m_ab", quick=False)
def quantized_270m_ab(quick: bool = False) -> list[Row]:
    """A/B pair tokens/s with an int8 base vs bf16 and f32 (our sampler, greedy, 1 prompt)."""
    import statistics

    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.sample.sampler import Sampler
    from adapters_lib.sample.settings import SamplingSettings

    spec = LoraSpec(rank=8, alpha=16.0)
    new = 16 if quick else 32
    settings = SamplingSettings(max_new_tokens=new)
    speed, prompts = {}, ["What is 3 plus 4?"]
    for name, dtype, mode in (("f32", "float32", "none"), ("bf16", "bfloat16", "none"),
                              ("int8", "bfloat16", "int8")):
        loaded = _load(dtype, mode)
        adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(0))
        sampler = Sampler.from_loaded(loaded, spec)

        def run(sampler=sampler, adapters=adapters, prompts=prompts) -> int:
            grid = sampler.generate_grid(prompts, [None, adapters], settings, chat=True)
            return sum(c["steps"] for row in grid for c in row)

        run()  # compile
        rates = []
        for _ in range(2 if quick else 4):
            t0 = time.perf_counter()
            n = run()
            rates.append(n / (time.perf_counter() - t0))
        speed[name] = statistics.median(rates)
        del sampler, loaded
    note = f"greedy, {new} new tokens a side, 1 prompt, LoRA r8 unmerged; the machine is shared"
    rows = [_ratio_row("A/B tokens/s, int8 base vs bf16 (real 270M)", speed["int8"], speed["bf16"],
                       unit="tok/s", target="≥ 1.5×", ref_name="bf16 base", note=note),
            _ratio_row("A/B tokens/s, int8 base vs f32 (real 270M)", speed["int8"], speed["f32"],
                       unit="tok/s", target="", ref_name="f32 base", note=note)]
    llama = _llama_rate(prompts[0], new, 2 if quick else 4)
    if llama is None:
        rows.append(Row(measure="A/B tokens/s, int8 base vs llama.cpp (real 270M)", ours=speed["int8"],
                        unit="tok/s", note=f"llama-cpp-python not built at {LLAMA_CPP}: "
                                           "scripts/build_llama_cpp.sh"))
    else:
        rows.append(_ratio_row("A/B tokens/s, int8 base vs llama.cpp (real 270M)", speed["int8"], llama,
                               unit="tok/s", target="", ref_name="llama.cpp, same GGUF, 1 sequence",
                               note=note + "; ours counts both sides of the pair (one batch of 2), "
                                           "llama.cpp one sequence on the file's Q4_K_M blocks, 1 thread"))
    return rows
