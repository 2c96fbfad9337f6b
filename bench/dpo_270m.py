"""DPO that changes what the model says: the real Gemma 3 270M (pretrained base), short
answers preferred over rambling ones (examples/dpo-short/), measured on held-out prompts.

    python -m bench.dpo_270m                      # every variant below: 6-17 min each on 2 shared cores,
                                                  # then 4-15 min of answers
    python -m bench.dpo_270m --variants plain rpo --steps 40

Each variant is a run of ``examples/dpo-short.toml`` with its overrides (one process, one
run after the other). Then, on the 34 prompts of ``examples/dpo-short/prompts.txt`` (no
training prompt among them), the base and every variant answer greedily (``--max-new-tokens``,
one batched grid): words per answer and the share of answers that end their turn. On the 22
held-out pairs: the reward accuracy and margin of the run's last eval, the chosen and
rejected answers' log-probs (summed over their tokens) under the base and the tuned model, and
the log-prob of the end-of-turn marker after the chosen answer, the token that decides whether
the answer stops there. The reward alone is not the measure: plain DPO saturates it while
the answers barely change (docs/dpo.md has the numbers).

Writes ``bench/results/dpo_270m.json`` (``--json``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "dpo-short.toml"
PROMPTS = ROOT / "examples" / "dpo-short" / "prompts.txt"
EVAL_PAIRS = ROOT / "examples" / "dpo-short" / "eval.jsonl"

VARIANTS: dict[str, list[str]] = {
    # the measured run: plain DPO (summed log-probs), beta 0.1, lr 2e-4
    "plain": ["train.sft_weight=0", "train.beta=0.1", "train.learning_rate=2e-4"],
    # + the chosen answers' cross-entropy (RPO / pref_ftx): examples/dpo-short.toml's own settings
    "rpo": [],
    # plain DPO on per-token means of the log-probs (length-normalised, SimPO's scoring), beta 2
    "norm": ["train.sft_weight=0", "train.length_norm=true", "train.beta=2.0"],
}


def _train(name: str, overrides: list[str], steps: int, root: str) -> dict:
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.train.loop import run_training

    cfg = load_config(CONFIG, [*overrides, f"train.steps={steps}", f"train.eval_every={steps}",
                               f"train.checkpoint_every={steps}", f'run.dir="{root}"', f'run.name="{name}"'])
    t = time.perf_counter()
    result = run_training(cfg, runs.create_run(cfg))
    if result.state != "completed":
        raise SystemExit(f"variant {name}: the run ended {result.state}")
    rows = runs.RunDir(result.run_dir).metrics()
    evals = [r for r in rows if "eval_reward_accuracy" in r]
    return {"run_dir": str(result.run_dir), "overrides": overrides, "seconds": round(time.perf_counter() - t, 1),
            "train_first": rows[0], "train_last": [r for r in rows if "loss" in r][-1],
            "eval_last": evals[-1] if evals else {}}


def _adapters(run_dir: str, loaded):
    from adapters_lib import runs
    from adapters_lib.train import checkpoints

    run = runs.RunDir(Path(run_dir))
    cfg = run.config()
    return cfg, checkpoints.restore_params(run.checkpoints_dir, run.checkpoints()[-1],
                                           checkpoints.abstract_trainable(loaded, cfg))


def _answer_logps(loaded, lora_spec, adapters, max_length: int) -> dict[str, list[float]]:
    """Per held-out pair: the chosen answer's and the rejected one's log-prob (summed over
    their scored tokens, the end-of-turn marker included) and the end-of-turn marker's alone
    after the chosen answer, under the base (``adapters`` None) or the tuned model."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from adapters_lib import lora
    from adapters_lib.data.packing import assemble
    from adapters_lib.data.preference import tokenize_pairs
    from adapters_lib.data.readers import read_path
    from adapters_lib.sample.prompts import codec_of
    from adapters_lib.train.loss import attention_mask

    pset, _ = tokenize_pairs(read_path(str(EVAL_PAIRS)).records, codec_of(loaded.tokenizer), max_length=max_length)
    model, params = loaded.model, loaded.params
    if adapters is not None:
        model, params = lora.wrap(model, lora_spec), lora.merge_lora(params, adapters)

    @jax.jit
    def token_logps(params, b):
        logits = model.apply({"params": params}, b["tokens"], positions=b["positions"],
                             attention_mask=attention_mask(b["segment_ids"])).logits
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return jnp.take_along_axis(logp, b["targets"][..., None], -1)[..., 0] * b["loss_mask"]

    out: dict[str, list[float]] = {"chosen": [], "rejected": [], "end_of_turn": []}
    n = len(pset)
    for side in ("chosen", "rejected"):
        batch = assemble(getattr(pset, side), [[i] for i in range(n)], n, max_length)
        got = np.asarray(token_logps(params, {k: jnp.asarray(v) for k, v in batch.items()}))
        out[side] = [float(x) for x in got.sum(-1)]
        if side == "chosen":
            last = batch["loss_mask"].shape[1] - 1 - np.argmax(batch["loss_mask"][:, ::-1] > 0, axis=1)
            out["end_of_turn"] = [float(got[i, last[i]]) for i in range(n)]
    return out


def _answers(loaded, lora_spec, adapters: list, prompts: list[str], max_new_tokens: int) -> list[list[dict]]:
    from adapters_lib.sample.sampler import Sampler
    from adapters_lib.sample.settings import SamplingSettings

    sampler = Sampler(loaded.model, loaded.params, loaded.tokenizer, lora_spec)
    return sampler.generate_grid(prompts, [None, *adapters], SamplingSettings(max_new_tokens=max_new_tokens))


def _side(cells: list[dict], logps: dict[str, list[float]]) -> dict:
    words = [len(c["text"].split()) for c in cells]
    return {"words_mean": round(statistics.mean(words), 1), "words_median": statistics.median(words),
            "ends_turn": round(sum(c["stop_reason"] == "stop" for c in cells) / len(cells), 3),
            "tokens_mean": round(statistics.mean(len(c["tokens"]) for c in cells), 1),
            "chosen_logp": round(statistics.mean(logps["chosen"]), 2),
            "rejected_logp": round(statistics.mean(logps["rejected"]), 2),
            "end_of_turn_logp": round(statistics.mean(logps["end_of_turn"]), 2),
            "examples": [c["text"][:300] for c in cells[:3]]}


def main(argv: list[str] | None = None) -> int:
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    parser = argparse.ArgumentParser(prog="python -m bench.dpo_270m", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--runs", default="", help="reuse these run folders (name=path ...) instead of training")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "dpo_270m.json"))
    args = parser.parse_args(argv)

    from adapters_lib.config import load_config
    from adapters_lib.models.loader import load_model

    root = tempfile.mkdtemp(prefix="dpo_270m_")
    reuse = dict(x.split("=", 1) for x in args.runs.split()) if args.runs else {}
    trained = {}
    for name in args.variants:
        if name in reuse:
            trained[name] = {"run_dir": reuse[name]}
            continue
        print(f"[dpo_270m] training {name} ({args.steps} steps) in {root}", file=sys.stderr, flush=True)
        trained[name] = _train(name, VARIANTS[name], args.steps, root)
        print(f"[dpo_270m] {name}: {json.dumps(trained[name]['eval_last'])}", file=sys.stderr, flush=True)

    cfg = load_config(CONFIG)
    loaded = load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype)
    names = list(trained)
    adapters = []
    for name in names:
        run_cfg, tree = _adapters(trained[name]["run_dir"], loaded)
        adapters.append(tree)
        lora_spec = run_cfg.lora
    prompts = [p for p in PROMPTS.read_text(encoding="utf-8").splitlines() if p.strip()]
    print(f"[dpo_270m] answering {len(prompts)} held-out prompts × {1 + len(names)} sides", file=sys.stderr,
          flush=True)
    t = time.perf_counter()
    grid = _answers(loaded, lora_spec, adapters, prompts, args.max_new_tokens)
    gen_s = time.perf_counter() - t
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "load": os.getloadavg()[0], "steps": args.steps,
              "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "generation_s": round(gen_s, 1),
              "base": _side(grid[0], _answer_logps(loaded, None, None, cfg.data.max_length)), "variants": {}}
    for i, name in enumerate(names, 1):
        side = _side(grid[i], _answer_logps(loaded, lora_spec, adapters[i - 1], cfg.data.max_length))
        result["variants"][name] = {**trained[name], **side}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(table(result))
    return 0


def table(result: dict) -> str:
    head = ("| side | words / answer (mean, median) | ends its turn | held-out reward acc. / margin "
            "| chosen / rejected log-prob | end-of-turn log-prob after chosen |\n|---|---|---|---|---|---|")
    lines = [head]

    def row(name: str, s: dict) -> str:
        ev = s.get("eval_last") or {}
        reward = (f"{ev['eval_reward_accuracy']:.2f} / {ev['eval_reward_margin']:.2f}"
                  if "eval_reward_accuracy" in ev else "—")
        return (f"| {name} | {s['words_mean']}, {s['words_median']} | {s['ends_turn']:.0%} | {reward} "
                f"| {s['chosen_logp']} / {s['rejected_logp']} | {s['end_of_turn_logp']} |")

    lines.append(row("base", result["base"]))
    lines += [row(n, s) for n, s in result["variants"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
