"""The quantized frozen base (``[model] quantize``, #29) on the real Gemma 3 270M.

- ``quantized_270m_memory``: the base's weights on the device (the device's own byte count)
  and the compiled LoRA step's peak memory, int8 / int4 / nf4 against bf16;
- ``quantized_270m_ppl``: base perplexity on held-out text (Shakespeare, as ``eval`` scores
  it), int8 / int4 / nf4 against f32;
- ``quantized_270m_ab``: the A/B pair's tokens/s (base and tuned sides in one batched
  computation, greedy) with an int8 base against bf16 and f32.

Not in ``--quick``: each compiles the 270M's programs once per mode.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.measures import SHARED_DATA, measure
from bench.report import Row

STARTER = "starter:gemma-3-270m"
MODES = ("int8", "int4", "nf4")


def _load(param_dtype: str = "float32", quantize: str = "none"):
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec(source=STARTER, quantize=quantize), param_dtype=param_dtype)


def _ratio_row(name: str, ours: float, ref: float, *, unit: str, target: str, ref_name: str,
               note: str) -> Row:
    from bench.measures import _row

    return _row(name, ours, ref, unit=unit, target=target, ref_name=ref_name, note=note)


@measure("quantized_270m_memory", quick=False)
def quantized_270m_memory(quick: bool = False) -> list[Row]:
    """Weights on the device and peak LoRA step memory per ``quantize`` mode vs bf16."""
    import jax

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import config_from_dict
    from adapters_lib.models import quantize
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    b, length = 2, 256
    rows, weights, peaks = [], {}, {}
    for mode in ("none", *MODES):
        loaded = _load("bfloat16", mode)
        weights[mode] = quantize.device_bytes(loaded.params)
        cfg = config_from_dict({"mesh": {"data": 1, "fsdp": 1, "tensor": 1, "devices": 1},
                                "model": {"quantize": mode},
                                "lora": {"rank": 8, "targets": ["all"], "dtype": "float32"},
                                "train": {"batch_size": b, "remat": True, "param_dtype": "bfloat16",
                                          "compute_dtype": "bfloat16"},
                                "data": {"max_length": length}})
        mesh = mesh_lib.make_mesh(cfg.mesh, jax.devices()[:1])
        adapters = lora.init_lora(loaded.model, cfg.lora, loaded.params, jax.random.key(0))
        steps = build_steps(loaded.model, cfg, make_optimizer(cfg.train), mesh, loaded.params, adapters)
        peaks[mode] = steps.compiled_memory((b, length))["total"]
        del steps, loaded
    for mode in MODES:
        target = {"int8": "≤ 0.55×", "int4": "≤ 0.3×", "nf4": "≤ 0.3×"}[mode]
        rows.append(_ratio_row(f"base weights on the device, {mode} (real 270M)",
                               weights[mode] / 2**20, weights["none"] / 2**20, unit="MiB",
                               target=target, ref_name="bf16 base",
                               note="on_device_size_in_bytes of every buffer; projections quantized "
                                    "(tile 64, bf16 scales), embedding table (168 M of 268 M params) "
                                    "and norms bf16"))
        rows.append(_ratio_row(f"peak LoRA step memory, {mode} base (real 270M)",
                               peaks[mode] / 2**20, peaks["none"] / 2**20, unit="MiB",
                               target="≤ 0.5×" if mode != "int8" else "", ref_name="bf16 base",
                               note=f"compiled memory analysis, batch {b}×{length}, LoRA r8 all "
                                    "targets, remat, bf16 compute"))
    return rows


def _heldout_file(tmp: Path) -> Path:
    text = (SHARED_DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")
    part = text[-6000:]  # the end of the corpus: not in any of our training configs
    path = tmp / "heldout.txt"
    path.write_text(part, encoding="utf-8")
    return path


@measure("quantized_270m_ppl", quick=False)
def quantized_270m_ppl(quick: bool = False) -> list[Row]:
    """Base perplexity on held-out text, int8/int4/nf4 vs f32 (same file, same tokens)."""
    import tempfile

    from adapters_lib.perplexity import evaluate_file

    with tempfile.TemporaryDirectory() as tmp:
        data = str(_heldout_file(Path(tmp)))
        ppl = {}
        for mode in ("none", *MODES):
            loaded = _load("float32", mode)
            res = evaluate_file(loaded.model, loaded.params, loaded.tokenizer, data, fmt="text",
                                max_length=512, loss_on="all")
            ppl[mode] = (res.perplexity, res.tokens)
            del loaded
    rows = []
    for mode in MODES:
        target = "≤ 1.005×" if mode == "int8" else "≤ 1.03×"
        rows.append(_ratio_row(f"base perplexity, {mode} (real 270M)", ppl[mode][0], ppl["none"][0],
                               unit="ppl", target=target, ref_name="f32 base",
                               note=f"held-out Shakespeare (last 6,000 chars, {ppl[mode][1]} tokens), "
                                    "sequences of 512, tile 64, f32 scales"))
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
    speed = {}
    for name, dtype, mode in (("f32", "float32", "none"), ("bf16", "bfloat16", "none"),
                              ("int8", "bfloat16", "int8")):
        loaded = _load(dtype, mode)
        adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(0))
        sampler = Sampler.from_loaded(loaded, spec)
        prompts = ["What is 3 plus 4?"]

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
    return [_ratio_row("A/B tokens/s, int8 base vs bf16 (real 270M)", speed["int8"], speed["bf16"],
                       unit="tok/s", target="≥ 1.5×", ref_name="bf16 base", note=note),
            _ratio_row("A/B tokens/s, int8 base vs f32 (real 270M)", speed["int8"], speed["f32"],
                       unit="tok/s", target="", ref_name="f32 base", note=note)]
