"""A LoRA family run's PEFT export read by Hugging Face ``peft`` (the check that a family run exports the run's own rank).

    PYTHONPATH=. python -m bench.peft_readback [--model starter:gemma-3-270m] [--out DIR]
        [--peft-python /tmp/peftenv/bin/python]      # or env PEFT_PYTHON

Trains a rank-8 LoRA run in the family program (``train.programs = "family"``, adapters padded
to ``train.rank_bucket`` 16 while training; checkpoints and exports must hold rank 8), exports it
as ``adapter`` (PEFT) and ``hf`` (merged weights), writes the base model as an HF folder with the
same converter, and runs the workbench's own forward (the tuned and the base side, f32) on a few
token sequences. Then, in a Python that has torch, transformers and peft (never this project's
dependencies: ``--peft-python``), it builds the base with ``AutoModelForCausalLM``, wraps it with
``PeftModel.from_pretrained(base, adapter)``, checks the adapter's keys one for one against the
LoRA modules peft made (no missing, no unexpected), ``r`` = 8 and the rank axis of every
``lora_A``/``lora_B``, and compares peft's logits with ours (and the merged export's, loaded
plainly by transformers). Prints one JSON object; ``--json FILE`` keeps it.

A scratch environment for the peft side, outside the repo (a CPU build of torch: PyTorch's CPU
wheel index as pip's ``--index-url``, or a local ``torch-*+cpu`` wheel file; measured with
Python 3.11, torch 2.13.0+cpu, transformers 5.25.0, peft 0.21.2):

    python3.11 -m venv /tmp/peftenv
    /tmp/peftenv/bin/pip install torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /tmp/peftenv/bin/pip install transformers peft safetensors numpy

This file runs as the peft side too (``--peft-side DIR``, under that Python): that half imports
nothing of the workbench. Not a test: CI has no torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.outdir import default_out

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "The capital of France is",
    "Question: Why is the sky blue?\nAnswer:",
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "Once upon a time, in a small village by the sea, there lived",
]
LENGTH = 32
"""Our forward runs every sequence padded to this (causal: padding after a token changes nothing
before it); the peft side runs each unpadded."""
RANK, ALPHA, BUCKET = 8, 16.0, 16


# --------------------------------------------------------------------------- the workbench side


def train_family_run(model: str, out: Path, steps: int) -> Path:
    """A rank-8, alpha-16, all-targets LoRA run in the family program; its run directory."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train.loop import run_training

    sets = {"run.dir": f'"{out / "runs"}"', "run.name": '"peft-readback"', "mesh.devices": "1",
            "lora.rank": str(RANK), "lora.alpha": str(ALPHA), "lora.targets": '"all"',
            "train.programs": '"family"', "train.rank_bucket": str(BUCKET),
            "train.steps": str(steps), "train.batch_size": "2", "data.max_length": "64",
            "train.learning_rate": "0.01", "train.warmup_steps": "0", "train.schedule": '"constant"',
            "train.eval_every": str(steps), "train.eval_batches": "1", "train.eval_exact_match": "0",
            "train.checkpoint_every": str(steps), "train.log_every": "1",
            "train.compute_dtype": '"float32"'}
    if model == "demo":
        cfg = load_config(None, [f"{k}={v}" for k, v in sets.items()])
    else:  # the real model's example: its data (answer-format), our sizes
        sets["model.source"] = f'"{model}"'
        cfg = load_config(ROOT / "examples" / "real-270m.toml", [f"{k}={v}" for k, v in sets.items()])
    run = runs.create_run(cfg)
    seen = _PlanLog()
    plan_log = logging.getLogger("adapters_lib.train.plan")
    level = plan_log.level
    plan_log.setLevel(logging.INFO)
    plan_log.addHandler(seen)
    try:
        result = run_training(cfg, run, hooks=default_hooks)
    finally:
        plan_log.removeHandler(seen)
        plan_log.setLevel(level)
    if result.state != "completed":
        raise SystemExit(f"training ended {result.state}: {result}")
    (run.path / "peft_readback_program.txt").write_text("\n".join(seen.lines) + "\n")
    return run.path


class _PlanLog(logging.Handler):
    """Keeps the train plan's "LoRA: rank 8 in a rank-16 program ..." line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("LoRA:"):
            self.lines.append(text.split("LoRA:", 1)[1].strip())


def workbench_side(run_path: Path, out: Path) -> dict:
    """Exports (adapter, merged hf, base hf), our logits on ``TEXTS``, the checkpoint's shapes."""
    import jax
    import numpy as np

    from adapters_lib.export.merged import save_hf
    from adapters_lib.tuned import export_run, load_run_model

    tuned = load_run_model(run_path)
    ranks = sorted({int(d) for x in jax.tree.leaves(tuned.adapters) for d in x.shape if d in (RANK, BUCKET)})
    t0 = time.perf_counter()
    export_run(run_path, "adapter", out=out / "adapter", force=True)
    export_run(run_path, "hf", out=out / "merged-hf", force=True)
    base_dir = out / "base-hf"
    if not (base_dir / "config.json").is_file():  # the base, by the same converter as the merged export
        save_hf(base_dir, jax.tree.map(np.asarray, tuned.loaded.params), tuned.loaded)
    exports_s = time.perf_counter() - t0

    tok = tuned.loaded.tokenizer
    ids = [[2, *tok.encode(t)][:LENGTH] for t in TEXTS]  # <bos> first, as Gemma's prompts start
    tokens = np.zeros((len(ids), LENGTH), np.int32)
    for i, row in enumerate(ids):
        tokens[i, :len(row)] = row
    positions = np.broadcast_to(np.arange(LENGTH), tokens.shape)
    mask = np.broadcast_to(np.tril(np.ones((LENGTH, LENGTH), bool)), (len(ids), LENGTH, LENGTH))
    logits = {}
    for side in ("tuned", "base"):
        apply, params = tuned.apply_fn(side)
        logits[side] = np.asarray(jax.jit(apply)(params, tokens, positions, mask), np.float32)
    np.savez(out / "ours.npz", tokens=tokens, lengths=np.array([len(r) for r in ids]),
             tuned=logits["tuned"], base=logits["base"])
    return {"run": str(run_path), "step": tuned.step, "family_program": _family_logged(run_path),
            "checkpoint_rank_dims": ranks, "exports_s": round(exports_s, 1),
            "lora_leaves": len(jax.tree.leaves(tuned.adapters))}


def _family_logged(run_path: Path) -> str:
    """The train plan's line naming the LoRA program the run trained in (kept by
    ``train_family_run``; "" for a ``--run`` made otherwise)."""
    path = run_path / "peft_readback_program.txt"
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


# --------------------------------------------------------------------------- the peft side


def peft_side(out: Path) -> dict:
    """Run under a Python with torch, transformers and peft: read the exports, compare logits."""
    import warnings

    import numpy as np
    import peft
    import torch
    import transformers
    from safetensors.numpy import load_file

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ours = np.load(out / "ours.npz")
    tokens, lengths = ours["tokens"], ours["lengths"]

    def load(folder: Path):
        return transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="eager").eval()

    def logits_of(model) -> list:
        with torch.no_grad():
            return [model(input_ids=torch.tensor(tokens[i:i + 1, :n], dtype=torch.long)).logits[0].float().numpy()
                    for i, n in enumerate(lengths)]

    def diff(a: list, b) -> dict:
        """Max abs and max relative (to the reference's largest |logit|) difference, f32."""
        refs = [np.asarray(b[i][:n]) if not isinstance(b, list) else b[i] for i, n in enumerate(lengths)]
        err = max(float(np.max(np.abs(x - r))) for x, r in zip(a, refs, strict=True))
        scale = max(float(np.max(np.abs(r))) for r in refs)
        argmax = sum(int(np.sum(np.argmax(x, -1) == np.argmax(r, -1))) for x, r in zip(a, refs, strict=True))
        return {"max_abs": err, "max_rel": err / scale, "argmax_agree": f"{argmax}/{int(sum(lengths))}"}

    base = load(out / "base-hf")
    base_logits = logits_of(base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = peft.PeftModel.from_pretrained(base, str(out / "adapter")).eval()
    peft_warnings = [str(w.message) for w in caught if "lora" in str(w.message).lower()
                     or "adapter" in str(w.message).lower() or "key" in str(w.message).lower()]
    config = model.peft_config["default"]
    file = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    made = {k.replace(".default.weight", ".weight"): v for k, v in model.state_dict().items()
            if ".lora_A." in k or ".lora_B." in k}
    missing = sorted(set(made) - set(file))
    unexpected = sorted(set(file) - set(made))
    not_equal = sorted(k for k in set(made) & set(file)
                       if not np.array_equal(made[k].detach().numpy(), file[k]))
    rank_axes = sorted({(tuple(v.shape)[0] if ".lora_A." in k else tuple(v.shape)[1]) for k, v in file.items()})
    modules = sorted({k.split(".")[-3] for k in file})
    peft_logits = logits_of(model)
    merged_logits = logits_of(load(out / "merged-hf"))
    return {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
        "config": {"r": config.r, "lora_alpha": config.lora_alpha, "target_modules": sorted(config.target_modules),
                   "scaling": sorted({float(m.scaling["default"]) for m in model.modules()
                                      if isinstance(getattr(m, "scaling", None), dict) and "default" in m.scaling})},
        "lora_tensors": len(file), "lora_modules": modules, "rank_axis_sizes": rank_axes,
        "missing_keys": missing, "unexpected_keys": unexpected, "loaded_not_equal": not_equal,
        "peft_warnings": peft_warnings,
        "peft_vs_ours_tuned": diff(peft_logits, ours["tuned"]),
        "merged_hf_vs_ours_tuned": diff(merged_logits, ours["tuned"]),
        "peft_vs_merged_hf": diff(peft_logits, merged_logits),
        "hf_base_vs_ours_base": diff(base_logits, ours["base"]),
        "ours_tuned_vs_ours_base": diff([np.asarray(ours["tuned"][i][:n]) for i, n in enumerate(lengths)], ours["base"]),
    }


# --------------------------------------------------------------------------- main


def _lacks(python: str) -> str:
    """Why ``python`` cannot be the peft side ("" when it can)."""
    if not python:
        return "none given"
    probe = ("import importlib.util as u; "
             "print(' '.join(m for m in ('torch', 'transformers', 'peft', 'safetensors') if u.find_spec(m) is None))")
    try:
        got = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python} does not run ({e})"
    if got.returncode != 0:
        return f"{python} failed: {got.stderr.strip()[-300:]}"
    return f"{python} lacks {got.stdout.strip()}" if got.stdout.strip() else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="starter:gemma-3-270m", help='"starter:gemma-3-270m" or "demo"')
    p.add_argument("--out", default=default_out("peft_readback"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--run", default="", help="an earlier run directory of this script (skip training)")
    p.add_argument("--peft-python", default=os.environ.get("PEFT_PYTHON", ""),
                   help="a Python with torch, transformers and peft (env PEFT_PYTHON)")
    p.add_argument("--peft-side", default="", help=argparse.SUPPRESS)
    p.add_argument("--json", default="", help="also write the result here")
    args = p.parse_args(argv)
    if args.peft_side:
        print(json.dumps(peft_side(Path(args.peft_side))))
        return 0
    python = args.peft_python
    missing = _lacks(python)
    if missing:
        print(f"the peft side needs a Python with torch, transformers, peft and safetensors "
              f"(--peft-python or env PEFT_PYTHON): {missing}; see this file's docstring", file=sys.stderr)
        return 2
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run_path = Path(args.run) if args.run else train_family_run(args.model, out, args.steps)
    train_s = time.perf_counter() - t0
    result = {"model": args.model, "train_s": round(train_s, 1), **workbench_side(run_path, out)}
    t1 = time.perf_counter()
    got = subprocess.run([python, str(Path(__file__).resolve()), "--peft-side", str(out)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        print(got.stderr[-4000:], file=sys.stderr)
        return got.returncode
    result.update(json.loads(got.stdout.strip().splitlines()[-1]))
    result["peft_side_s"] = round(time.perf_counter() - t1, 1)
    ok = (not result["missing_keys"] and not result["unexpected_keys"] and not result["loaded_not_equal"]
          and result["config"]["r"] == RANK and result["rank_axis_sizes"] == [RANK]
          and result["checkpoint_rank_dims"] == [RANK] and f"rank-{BUCKET} program" in result["family_program"])
    result["ok"] = ok
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
