"""QLoRA's quality bar on the real Gemma 3 270M: the same LoRA run on a quantized base and on
a bf16 base (same data, steps, seed, rate), each scored on the held-out eval file with its own
base (``eval --run``: the run's ``[model] quantize``). Issue #29's target: an nf4 base within
3 % of the bf16 base's eval loss, either way (the QLoRA paper's finding: NF4 + LoRA matches
16-bit LoRA; a much lower loss is no more parity than a higher one).

The run is ``examples/real-270m.toml`` (answer-format conversations, LoRA r8 on every
projection) made short: ``STEPS`` steps of 2 rows of 64 tokens at a constant ``LR``, params and
compute in bf16, evaluated at the end on ``answer-format/eval.jsonl``; once per seed of
``SEEDS``, each base with the same seeds, and the row is the mean over seeds (each seed's pair
in the note, with each run's first and last logged training loss: the two bases start from
the same data, so a gap there is the base's own, a gap at the end the training's).

Options (environment): ``BENCH_QLORA_STEPS`` (default 48), ``BENCH_QLORA_SEEDS`` (default
"0,1"), ``BENCH_QLORA_LR`` (default 5e-4: ``LR``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from bench.measures import measure
from bench.report import Row

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "real-270m.toml"
BASES = (("bf16", "none", 64, "auto", "rtn"), ("nf4", "nf4", 64, "auto", "rtn"),
         ("nf4 gptq", "nf4", 64, "auto", "gptq"))
"""(label, quantize, tile, quantize_embedding, quantize_method); the first is the reference.
GPTQ calibrates on the run's own training data (``quantize_calibration`` left "")."""
STEPS = int(os.environ.get("BENCH_QLORA_STEPS", "48"))
SEEDS = tuple(int(s) for s in os.environ.get("BENCH_QLORA_SEEDS", "0,1").split(","))
LR = float(os.environ.get("BENCH_QLORA_LR", "5e-4"))
"""At 2e-3 (this bench's rate before) 2 rows of 64 tokens train unstably (grad norms 10–30
late in the run) and the final eval loss follows the trajectory's last swing: seed 0 gave nf4
0.63 against bf16 1.94, seed 1 0.64 against 0.74, and a float bf16 base holding the nf4
numbers 0.70 (so not the quantized code path: the same numbers as floats land there too)."""
LOG_EVERY = 8


def _run(label: str, quantize: str, tile: int, table: str, method: str, seed: int, root: Path) -> dict:
    """The run on ``quantize`` after ``STEPS`` steps: its eval loss and first/last train loss."""
    from adapters_lib import perplexity, runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    name = f"{label.replace(' ', '_').replace(',', '')}-s{seed}"
    cfg = load_config(str(EXAMPLE), [
        f"train.steps={STEPS}", f"train.eval_every={STEPS}", "train.eval_batches=1",
        "train.batch_size=2", "data.max_length=64", 'train.schedule="constant"', f"train.learning_rate={LR}",
        "train.warmup_steps=0", f"train.checkpoint_every={STEPS}", f"train.log_every={LOG_EVERY}",
        'train.param_dtype="bfloat16"', 'train.compute_dtype="bfloat16"', f"train.seed={seed}",
        "mesh.devices=1", f'model.quantize="{quantize}"', f"model.quantize_tile_size={tile}",
        f'model.quantize_embedding="{table}"', f'model.quantize_method="{method}"',
        f'run.dir="{root / name}"', f'run.name="qlora-{name}"'])
    run = runs.create_run(cfg)
    result = run_training(cfg, run, hooks=default_hooks)
    if result.state != "completed":
        raise RuntimeError(f"{label}: the run ended {result.state}")
    losses = [m["loss"] for m in run.metrics() if "loss" in m and "step" in m]
    eval_file = EXAMPLE.parent / "answer-format" / "eval.jsonl"
    loss = perplexity.evaluate(run=str(run.path), data=str(eval_file)).loss
    return {"eval": loss, "first": losses[0] if losses else float("nan"),
            "last": losses[-1] if losses else float("nan")}


@measure("quantized_270m_lora", quick=False)
def quantized_270m_lora(quick: bool = False) -> list[Row]:
    """Eval loss of the same LoRA run on quantized bases against the bf16 base (mean of seeds)."""
    from bench.measures import _row

    out: dict[str, list[dict]] = {label: [] for label, *_ in BASES}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in SEEDS:  # the bases alternate within a seed
            for label, q, tile, table, method in BASES:
                out[label].append(_run(label, q, tile, table, method, seed, Path(tmp)))
    mean = {label: statistics.fmean(r["eval"] for r in runs) for label, runs in out.items()}

    def pair(label: str) -> str:
        return "; ".join(
            f"seed {s}: {label} {r['eval']:.3f} vs bf16 {b['eval']:.3f} (train loss {r['first']:.2f}"
            f"→{r['last']:.2f} vs {b['first']:.2f}→{b['last']:.2f})"
            for s, r, b in zip(SEEDS, out[label], out["bf16"], strict=True))

    note = (f"examples/real-270m.toml, {STEPS} steps × 2 rows × 64 tokens, lr {LR:g} constant, "
            f"LoRA r8 all targets, bf16 params and compute, mean of seeds {list(SEEDS)}; eval loss on "
            "answer-format/eval.jsonl with the run's own base")
    return [_row(f"LoRA eval loss, {label} base vs bf16 base (real 270M)", mean[label], mean["bf16"],
                 unit="nats", target="within 3 %" if label.startswith("nf4") else "", ref_name="bf16 base",
                 note=f"{note}; {pair(label)}") for label, *_ in BASES[1:]]
