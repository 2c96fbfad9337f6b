"""The interactive loop on an accelerator: tweak, launch, compare, in ONE running engine.

``python -m bench.tpu_loop --model 270m|1b|demo [--out DIR] [--steps N]`` (``scripts/tpu_device.sh
check loop`` runs 270m then 1b on the chip). A fresh home (empty program store and compile cache),
one engine started, then the user's loop through the engine's API (what the CLI's ``train``,
``compare`` and ``eval`` send; each row names the CLI command it stands for):

- cold launch; a repeat; lr only; rank 8 → 16 → 32 → 8; targets all → q, v → all: seconds from the request to the run's first metrics record (step 1),
  and the longest gap between two steps' records after it (a mid-run compile shows as a stall;
  ``log_every`` 1, evals and checkpoints pushed past the end); ``end_s``: from the last step's
  record to the run's end (its final checkpoint written: what the user waits before Compare);
- compare right after the last run ends (request to each side's first token), then again;
  a change of ``max-new-tokens``; eval of the run on its eval file;
- then (unless ``LOOP_LENGTHS=0``) a ``max_length`` change, launched as is (not with
  ``LOOP_LENGTHS=ahead``); and a second one
  compiled ahead first as Configure does on an edit (``prepare``): seconds until its programs
  are ready (the thinking time it needs), then the launch. Last: each compiles a new shape.

Models: ``270m`` — the real Gemma 3 270M on its README config (``examples/real-270m.toml``,
4 × 128: its batches hold 64 to 80 loss positions a row); ``1b`` — the Gemma-3-1B shape with
random weights (an HF safetensors folder written here on the host CPU, the bundle's 262k tokenizer)
at 4 × 2048 on text made of this repository's docs; ``demo`` — the demo model (a dry run of the
script on a CPU). Results: ``DIR/loop-MODEL.json`` and a line a row; the engine log beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.interactive_loop import EXE, _compare, _field
from bench.outdir import default_out

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Explain in one sentence why the sky is blue."


def _log(*parts: Any) -> None:
    print("[loop]", *parts, file=sys.stderr, flush=True)


def _docs_text(path: Path) -> Path:
    """A plain-text file of this repository's docs (README, docs/, CHANGELOG): long rows for the
    1B shape's 2048-token batches."""
    parts = [p.read_text(errors="replace") for p in sorted([REPO / "README.md", REPO / "CHANGELOG.md",
                                                            *(REPO / "docs").rglob("*.md")])]
    path.write_text(json.dumps({"text": "\n\n".join(parts)}) + "\n")
    return path


def random_1b(folder: Path) -> Path:
    """A Hugging Face folder (``model.safetensors``, ``config.json``, the tokenizer) of the
    Gemma-3-1B shape with random bf16 weights, written by a CPU process (the engine holds the
    accelerator): numpy draws in gemma's layout, ``hf_convert.gemma_to_hf``. Not an orbax
    checkpoint: gemma reads those through ``gm.ckpts``, whose import needs TensorFlow (absent
    on the chip); the loader reads safetensors tensor by tensor without it."""
    ckpt = folder / "gemma3-1b-random"
    if (ckpt / "config.json").exists():
        return ckpt
    code = f"""
import numpy as np, ml_dtypes
from adapters_lib.models import families
from adapters_lib.models.hf import hf_convert
name, arch = families.KNOWN[("gemma3", "1b")]
rng = np.random.default_rng(0)
params = {{}}
for path, shape in hf_convert.gemma_shapes(arch).items():
    leaf = params
    for k in path[:-1]:
        leaf = leaf.setdefault(k, {{}})
    if len(shape) == 1:  # norms: gemma's scale is 1 + w
        leaf[path[-1]] = np.zeros(shape, ml_dtypes.bfloat16)
    else:
        leaf[path[-1]] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
tensors = hf_convert.gemma_to_hf(params, arch=arch)
hf_convert.save_hf(__import__("pathlib").Path({str(ckpt)!r}), tensors, families.hf_config_for(arch, dtype="bfloat16"))
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=900)
    tok = os.environ.get("TOKENIZER", "")
    if tok:
        shutil.copy(tok, ckpt / "tokenizer.model")
    _log(f"random 1B checkpoint written in {time.perf_counter() - t0:.0f} s: {ckpt}")
    return ckpt


def _overrides(model: str, work: Path, steps: int) -> list[str]:
    common = [f"train.steps={steps}", "train.eval_every=100000", "train.checkpoint_every=100000",
              "train.log_every=1", "mesh.devices=1", "mesh.data=1", "mesh.fsdp=1", "mesh.tensor=1"]
    if model == "270m":
        return ["--config", str(REPO / "examples" / "real-270m.toml"), *common]
    if model == "demo":
        return ['model.source="demo"', "data.max_length=64", "train.batch_size=8", *common]
    tok = os.environ.get("TOKENIZER", "")
    if not tok:
        raise SystemExit("the 1B loop needs TOKENIZER (a 262k-vocabulary tokenizer.model)")
    return [f'model.source="{random_1b(work)}"', f'model.tokenizer="{tok}"',
            f'data.path="{_docs_text(work / "docs.jsonl")}"', 'data.format="text"', "data.max_length=2048",
            "data.eval_fraction=0.05", "train.batch_size=4", 'train.compute_dtype="bfloat16"',
            'train.param_dtype="bfloat16"', "train.learning_rate=1e-4", "train.warmup_steps=2",
            "train.eval_batches=1", "train.eval_exact_match=0", "lora.rank=8", "lora.alpha=16.0",
            'lora.targets="all"', *common]


def _run(client: Any, cfg: list[str], extra: list[str]) -> dict[str, Any]:
    """One launch: seconds to step 1, the longest gap between later steps' records, the run id."""
    from adapters_lib.config import load_config

    path, overrides = (cfg[1], cfg[2:]) if cfg and cfg[0] == "--config" else (None, cfg)
    t0 = time.perf_counter()
    # as `train CONFIG --set … --detach` sends it: the config resolved here, paths absolute
    text = load_config(path, [*overrides, *extra]).to_toml()
    run = client.create_run(config_toml=text, source="bench")
    total = load_config(None, [*overrides, *extra]).train.steps if path is None else \
        load_config(path, [*overrides, *extra]).train.steps
    first, last, gap, steps, at, final = None, None, 0.0, 0, 0, None
    for item in client.stream_run(run.id):
        now = time.perf_counter()
        if item.type == "metrics":
            if int(_field(item.data, "step", 0)) >= total and final is None:
                final = now
            step = int(_field(item.data, "step", 0))
            if step >= 1 and first is None:
                first = now - t0
            elif first is not None and last is not None and steps < step < total:  # the last step's
                # record waits for the run's final checkpoint: not a step
                if now - last > gap:
                    gap, at = now - last, step
            if step > steps:
                steps, last = step, now
        elif item.type == "end":
            state = str(_field(item.data, "state", ""))
            if state != "completed":
                raise RuntimeError(f"run {run.id} ended {state}: {item.data}")
            break
    end = time.perf_counter()
    return {"run": run.id, "step1_s": first, "max_gap_s": gap, "gap_at_step": at, "steps": steps,
            "total_s": end - t0, "end_s": None if final is None else end - final}


def _prepare(client: Any, cfg: list[str], extra: list[str], budget: float = 300.0) -> dict[str, Any]:
    """Configure's compile-ahead of a config (``prepare CONFIG --set …``): seconds until every
    job of the request is ready (the user's thinking time it needs), or the budget."""
    from adapters_lib.config import load_config

    path, overrides = (cfg[1], cfg[2:]) if cfg and cfg[0] == "--config" else (None, cfg)
    t0 = time.perf_counter()
    reply = client.compile_ahead(config_toml=load_config(path, [*overrides, *extra]).to_toml(),
                                 source="bench", force=True)
    request = reply.request.request if reply.request is not None else 0
    states: dict[str, str] = {}
    while time.perf_counter() - t0 < budget:
        got = client.compile_jobs(request)
        latest = got.latest
        states = {f"{j.id} {j.what}": j.state for j in got.jobs if j.request == request}
        planned = latest is not None and latest.request == request and latest.state in ("planned", "failed")
        if planned and states and all(v in ("ready", "failed", "dropped") for v in states.values()):
            break
        if latest is not None and latest.request == request and latest.state == "failed":
            break
        time.sleep(0.5)
    return {"request": request, "ready_s": time.perf_counter() - t0, "jobs": states}


TWEAKS = [
    ("cold launch", []),
    ("a repeat", []),
    ("lr only", ["train.learning_rate=0.0015"]),
    ("rank 8 → 16", ["lora.rank=16", "lora.alpha=32.0"]),
    ("rank 16 → 32", ["lora.rank=32", "lora.alpha=64.0"]),
    ("rank 32 → 8", ["lora.rank=8", "lora.alpha=16.0"]),
    ("targets all → q, v", ['lora.targets=["q", "v"]']),
    ("targets q, v → all", ['lora.targets="all"']),
]


def loop(model: str, out: Path, steps: int, extra: list[str] = ()) -> dict[str, Any]:
    from workbench.client import EngineClient

    work = Path(tempfile.mkdtemp(prefix=f"loop-{model}-"))
    home = work / "home"
    os.environ["GEMMA_WORKBENCH_HOME"] = str(home)
    cfg = [*_overrides(model, Path(os.environ.get("LOOP_WORK", work)), steps), *extra]
    length = {"270m": 256, "1b": 1024, "demo": 32}[model]
    ahead = {"270m": 192, "1b": 1536, "demo": 48}[model]
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"model": model, "steps": steps, "rows": rows}
    subprocess.run([EXE, "engine", "stop", "--force"], capture_output=True, timeout=300)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every row: a call cut short by its time limit keeps what it measured
        log = home / "state" / "engine.log"
        if log.exists():
            (out / f"engine-{model}.log").write_text(log.read_text(errors="replace"))
        stacks = home / "state" / "stacks.log"  # GEMMA_WORKBENCH_STACKS_EVERY_S: what a stall held
        if stacks.exists():
            shutil.copyfile(stacks, out / f"stacks-{model}.log")
        for summary in (home / "state" / "traces").glob("run-*/summary.txt"):  # GEMMA_WORKBENCH_TRACE_RUNS
            shutil.copyfile(summary, out / f"trace-{model}-{summary.parent.name}.txt")
        (out / f"loop-{model}.json").write_text(json.dumps(result, indent=1, default=str))

    t0 = time.perf_counter()
    started = subprocess.run([EXE, "engine", "start"], capture_output=True, text=True, timeout=300)
    if started.returncode:  # say why: on the chip a start with GEMMA_WORKBENCH_STACKS_EVERY_S set
        # exited 2 and the output said nothing more
        raise SystemExit(f"engine start failed ({started.returncode}): "
                         f"{started.stderr.strip() or started.stdout.strip()}")
    try:
        with EngineClient.connect(start=False) as client:
            client.status(wait=True)
            result["engine_start_s"] = time.perf_counter() - t0
            run_id = ""
            lengths = [f"data.max_length={length}"], [f"data.max_length={ahead}"]

            def train_row(label: str, extra: list[str]) -> None:
                nonlocal run_id
                row: dict[str, Any] = {"what": label, "cli": "gemma-workbench train CONFIG " +
                                       " ".join(f"--set '{e}'" for e in extra)}
                if "prepared" in label:  # the user edits in Configure (or `prepare`), then launches
                    row["prepare"] = _prepare(client, cfg, extra)
                    _log(f"{model}: {label}: compiled ahead in {row['prepare']['ready_s']:.1f} s "
                         f"({row['prepare']['jobs']})")
                row.update(_run(client, cfg, extra))
                rows.append(row)
                save()
                run_id = row["run"]
                _log(f"{model}: {label}: step 1 at {row['step1_s']:.1f} s, longest gap {row['max_gap_s']:.2f} s "
                     f"(step {row['gap_at_step']}), run end {row['end_s'] or 0:.1f} s after the last step")

            for label, extra in TWEAKS:
                train_row(label, extra)
            # the compare and eval rows read the last tweak's run, before the max_length rows (each
            # compiles a new shape for ~100 s: a call cut short by its limit keeps these)
            for label, decoding in (("compare right after the run", {}), ("compare again", {}),
                                    ("compare, max-new-tokens 200", {"max_new_tokens": 200})):
                got = _compare(client, run_id, **decoding)
                first = max(got["first"].values()) if got["first"] else None
                rows.append({"what": label, "cli": f"gemma-workbench compare --run RUN --prompt ... "
                             f"{'--max-new-tokens 200' if decoding else ''}".strip(),
                             "first_token_s": first, "sides": got["first"],
                             "tokens_per_s": got["done"].get("tokens_per_s")})
                _log(f"{model}: {label}: first token {first:.2f} s")
                save()
            data = _eval_data(model, work)
            if data:
                t = time.perf_counter()
                ev = client.eval(data, run_id=run_id)
                rows.append({"what": "eval --run", "cli": "gemma-workbench eval --run RUN --data FILE",
                             "seconds": time.perf_counter() - t, "loss": getattr(ev, "loss", None)})
                _log(f"{model}: eval: {rows[-1]['seconds']:.2f} s")
                save()
            which = os.environ.get("LOOP_LENGTHS", "1")  # "ahead": the prepared row only; "plain": the other
            if which != "0":
                if which != "ahead":
                    train_row(f"max_length → {length}", lengths[0])
                if which != "plain":
                    train_row(f"max_length → {ahead}, prepared first", lengths[1])
    except Exception as e:  # the row that failed, and why the engine stopped, in a "[loop]" line
        _log(f"{model}: stopped after {len(rows)} row(s): {type(e).__name__}: {str(e)[:300]}"
             f"{_engine_death(home / 'state' / 'engine.log')}")
        raise
    finally:
        subprocess.run([EXE, "engine", "stop", "--force"], capture_output=True, timeout=300)
        save()
    return result


def _engine_death(log: Path) -> str:
    """The engine log's last words, as a clause: its fatal error with the line before it (on
    the chip "SystemError: …" then "Fatal Python error: Segmentation fault"), else its last
    line; "" without a log."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    if not fatal:
        return f"; the engine log's last line: {lines[-1][:300]}" if lines else ""
    i = fatal[-1]
    said = [lines[i - 1], lines[i]] if i and not lines[i - 1].startswith(" ") else [lines[i]]
    return f"; the engine log: {' / '.join(said)}"


def _eval_data(model: str, work: Path) -> str:
    if model in ("270m", "demo"):
        return str(REPO / "examples" / "answer-format" / "eval.jsonl")
    if model == "1b":
        return str(work / "docs.jsonl") if (work / "docs.jsonl").exists() else ""
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("270m", "1b", "demo"), default="270m")
    p.add_argument("--out", default=default_out("loop"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--set", action="append", default=[], dest="extra", metavar="KEY=VALUE",
                   help="a config override for every run (e.g. train.programs=\"family\" on a CPU)")
    a = p.parse_args(argv)
    res = loop(a.model, Path(a.out), a.steps, a.extra)
    for r in res["rows"]:
        print(json.dumps(r, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
