"""The interactive loop: time to step 1 and to the first Compare token through real
engine processes, and the A/B decode rate a side against ``gm.text.Sampler`` and llama.cpp.

- ``loop_demo`` / ``loop_270m``: a fresh home (empty compile cache, base scores and converted
  weights), then for one model: a 3-step run in a new engine (cold); the same config in a new
  engine (warm caches); an lr-only change in a new engine and in the same one (each from the
  engine's start, or from the request in the same engine, to the first metrics record); then
  the Compare right after training (the TUI's defaults, once the engine's warm-up of that run
  ended), the home's first Compare (in the engine that trained, 16 new tokens: a length the
  warm-up did not compile, so its programs compile), the same
  Compare after an engine restart, and a warm one (request to each side's first token, as the
  client sees it; each side's decode rate as the engine reports it).
- ``decode_270m``: in this process, the real 270M's A/B (base and tuned, one batched
  computation, LoRA r8 on q/v/down unmerged) decode rate a side with an f32 base, its bf16
  generation copy, and the int8 base (as trained, f32 scales; and its bf16 generation copy,
  read by int8 × int8 dots), against ``gm.text.Sampler`` (one
  model) and llama.cpp (llama-cpp-python, when built: ``scripts/build_llama_cpp.sh``) on the
  same GGUF file, 2 threads; alternating, median of the repetitions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.measures import _row, measure
from bench.report import Row

_VENV_EXE = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench"
EXE = str(_VENV_EXE) if _VENV_EXE.exists() else (shutil.which("gemma-workbench") or str(_VENV_EXE))
"""The project's ``gemma-workbench``: its venv's, else the one on PATH (the TPU bundle's)."""
PROMPT = "Count from one to one hundred in words, separated by commas."
LLAMA_CPP_DIR = Path(os.environ.get("GEMMA_WORKBENCH_LLAMA_CPP",
                                    Path.home() / ".cache" / "gemma-workbench" / "llama-cpp"))
MODELS = {
    "demo": ["model.source=\"demo\"", "train.batch_size=8", "data.max_length=64"],
    "270m": ["model.source=\"starter:gemma-3-270m\"", "train.batch_size=2", "data.max_length=128",
             "train.eval_exact_match=0"],
}
"""The run of each model: 3 steps on the demo data, one eval batch, a checkpoint at the end."""
COMMON = ["train.steps=3", "train.eval_every=3", "train.checkpoint_every=3", "train.eval_batches=1",
          "train.warmup_steps=1", "mesh.devices=1", "mesh.data=1", "mesh.fsdp=1", "mesh.tensor=1"]


@contextlib.contextmanager
def _home() -> Iterator[str]:
    """A fresh GEMMA_WORKBENCH_HOME for this process and the engines it starts."""
    old = os.environ.get("GEMMA_WORKBENCH_HOME")
    with tempfile.TemporaryDirectory() as home:
        os.environ["GEMMA_WORKBENCH_HOME"] = home
        try:
            yield home
        finally:
            subprocess.run([EXE, "engine", "stop", "--force"], capture_output=True, timeout=300)
            if old is None:
                os.environ.pop("GEMMA_WORKBENCH_HOME", None)
            else:
                os.environ["GEMMA_WORKBENCH_HOME"] = old


def _new_engine() -> float:
    """Stop any engine of this home and start a new one; the time ``engine start`` took."""
    subprocess.run([EXE, "engine", "stop", "--force"], capture_output=True, timeout=300)
    t0 = time.perf_counter()
    subprocess.run([EXE, "engine", "start"], check=True, capture_output=True, timeout=300)
    return time.perf_counter() - t0


def _to_step_1(client: Any, overrides: list[str]) -> tuple[float, str]:
    """Seconds from the request to the run's first metrics record, and the run's id (it is
    followed to its end)."""
    t0 = time.perf_counter()
    run = client.create_run(config_toml="", overrides=overrides, source="bench")
    first = None
    for item in client.stream_run(run.id):
        if item.type == "metrics" and first is None and _field(item.data, "step", 0) >= 1:
            first = time.perf_counter() - t0
        if item.type == "end":
            if str(_field(item.data, "state", "")) != "completed":
                raise RuntimeError(f"run {run.id} ended {item.data}")
            break
    if first is None:
        raise RuntimeError(f"run {run.id} logged no step")
    return first, run.id


def _field(data: Any, key: str, default: Any) -> Any:
    """A stream item's value (a typed record, or a metrics record kept as a dict)."""
    return data.get(key, default) if isinstance(data, dict) else getattr(data, key, default)


def _compare(client: Any, run_id: str, **decoding: Any) -> dict[str, Any]:
    """Request to each side's first token (client clock), and the done reply's figures."""
    t0 = time.perf_counter()
    first: dict[str, float] = {}
    done: dict[str, Any] = {}
    for item in client.compare(PROMPT, run_id, **decoding):
        if item.type == "token":
            side = item.data.side
            if side and side not in first and item.data.token is not None:
                first[side] = time.perf_counter() - t0
        elif item.type == "done":
            done = item.data.to_json()
        elif item.type == "error":
            raise RuntimeError(str(item.data))
    return {"first": first, "done": done}


def _warm_up(client: Any, run_id: str, timeout: float = 600.0) -> float:
    """Wait for the engine's Compare warm-up of ``run_id`` (``engine/warm_compare.py``) to end;
    the seconds it took, as its log line says."""
    import re

    log = Path(os.environ["GEMMA_WORKBENCH_HOME"]) / "state" / "engine.log"
    t0 = time.perf_counter()
    while True:
        got = re.findall(rf"run {re.escape(run_id)}: Compare (?:warmed in|warm-up \w+ after) "
                         rf"([0-9.]+) s", log.read_text(errors="replace"))
        if got and not client.status().warming:
            return float(got[-1])
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"no Compare warm-up of {run_id} ended in {timeout:.0f} s")
        time.sleep(0.5)


def _loop_rows(name: str, quick: bool) -> list[Row]:
    from workbench.client import EngineClient

    overrides = [*COMMON, *MODELS[name]]
    lr = [*overrides, "train.learning_rate=0.002"]
    label = "real 270M" if name == "270m" else "demo"
    times: dict[str, float] = {}
    with _home():
        start = _new_engine()
        with EngineClient.connect(start=False) as client:
            t, _ = _to_step_1(client, overrides)
        times["cold"] = start + t
        start = _new_engine()
        with EngineClient.connect(start=False) as client:
            t, _ = _to_step_1(client, overrides)
        times["warm"] = start + t
        start = _new_engine()
        with EngineClient.connect(start=False) as client:
            t, _ = _to_step_1(client, lr)
            times["lr_new"] = start + t
            times["lr_same"], run_id = _to_step_1(client, [*overrides, "train.learning_rate=0.003"])
            warmed = _warm_up(client, run_id)  # the idle engine warms this run's Compare
            right = _compare(client, run_id)  # the TUI's defaults (64 new tokens): programs warm
            never = _compare(client, run_id, max_new_tokens=16)  # other lengths: programs compile
        _new_engine()
        with EngineClient.connect(start=False) as client:
            client.status(wait=True)  # JAX up: the restart's own import is not the Compare's
            first = _compare(client, run_id, max_new_tokens=16)
            warm = [_compare(client, run_id, max_new_tokens=32) for _ in range(1 if quick else 3)]
    note = (f"{label}, 3-step LoRA run ({' '.join(MODELS[name])}), one eval batch; from `engine start` "
            "(a new engine) or the request (the same engine) to the first metrics record")
    rows = [Row(measure=f"time to step 1, cold (new engine, empty caches; {label})", ours=times["cold"],
                unit="s", note=note)]
    for key, what in (("warm", "warm caches, new engine"), ("lr_new", "lr-only change, new engine"),
                      ("lr_same", "lr-only change, same engine")):
        rows.append(_row(f"time to step 1, {what} ({label})", times[key], times["cold"], unit="s",
                         target="≤ 0.35×", ref_name="cold", note=note, lower_is_better=True))
    after = max(right["first"].values())
    rows.append(Row(measure=f"first Compare right after training, first token ({label})", ours=after,
                    unit="s", note=f"the slower side (base {right['first'].get('base', 0):.2f} s, tuned "
                                   f"{right['first'].get('tuned', 0):.2f} s): the TUI's Compare (default "
                                   f"settings, 64 new tokens) once the idle engine's warm-up of the run "
                                   f"just trained ended (it took {warmed:.1f} s, engine log)"))
    cold = max(never["first"].values())
    rows.append(Row(measure=f"first Compare ever, first token (cold programs; {label})", ours=cold, unit="s",
                    note=f"the slower side (base {never['first'].get('base', 0):.2f} s, tuned "
                         f"{never['first'].get('tuned', 0):.2f} s): in the engine that trained, 16 new "
                         f"tokens: a KV-cache length the warm-up did not compile, so the prefill and "
                         f"decode compile (empty caches); the tuned model was already loaded by the "
                         f"warm-up"))
    slowest = max(first["first"].values())
    rows.append(Row(measure=f"first Compare after an engine restart, first token ({label})", ours=slowest,
                    unit="s", target="≤ 8 s", met=slowest <= 8.0,
                    note=f"the slower side (base {first['first'].get('base', 0):.2f} s, tuned "
                         f"{first['first'].get('tuned', 0):.2f} s), request to first token with the "
                         f"new engine's JAX up, the same Compare made before the restart: checkpoint "
                         f"restore, model load, the programs read back (program store) and prefill; "
                         f"16 new tokens"))
    w = warm[-1]
    rates = {s: statistics.median(x["done"]["tokens_per_s"][s] for x in warm) for s in ("base", "tuned")}
    made = {s: w["done"]["tokens"][s] for s in ("base", "tuned")}  # 1 token: no decode rate
    ran = ", ".join(f"{s} {w['done']['dtype'][s]}" for s in ("base", "tuned"))
    firsts = {s: statistics.median(x["first"][s] for x in warm) for s in ("base", "tuned")}
    rows.append(Row(measure=f"warm Compare: first token / decode rate a side ({label})",
                    ours=max(firsts.values()), unit="s",
                    note=f"first token base {firsts['base']:.2f} s, tuned {firsts['tuned']:.2f} s; decode "
                         f"base {rates['base']:.1f}, tuned {rates['tuned']:.1f} tok/s ({ran}; tokens made "
                         f"base {made['base']}, tuned {made['tuned']}); up to 32 new tokens, median of "
                         f"{len(warm)}"))
    return rows


@measure("loop_demo")
def loop_demo(quick: bool = False) -> list[Row]:
    """The interactive loop's waits on the demo model, through engine processes."""
    return _loop_rows("demo", quick)


@measure("loop_270m", quick=False)
def loop_270m(quick: bool = False) -> list[Row]:
    """The interactive loop's waits on the real 270M, through engine processes."""
    return _loop_rows("270m", quick)


# --------------------------------------------------------------------------- decode


def _llama(path: Path) -> Any:
    if not (LLAMA_CPP_DIR / "llama_cpp").is_dir():
        return None
    sys.path.insert(0, str(LLAMA_CPP_DIR))
    try:
        import llama_cpp
    except Exception:  # noqa: BLE001 - not built here: the row says so
        return None
    return llama_cpp.Llama(model_path=str(path), n_threads=os.cpu_count() or 2, n_ctx=512, verbose=False,
                           seed=0)


def _llama_rate(llm: Any, prompt: str, n: int) -> tuple[float, float]:
    """(first-token seconds, decode tokens/s after it) of ``n`` greedy tokens."""
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    llm.reset()
    t0 = time.perf_counter()
    stamps = []
    for _ in llm.generate(tokens, temp=0.0, top_k=1, reset=True):
        stamps.append(time.perf_counter())
        if len(stamps) >= n:
            break
    return stamps[0] - t0, (len(stamps) - 1) / (stamps[-1] - stamps[0])


def _gm_rate(loaded: Any, text: str, n: int) -> Any:
    from gemma import gm

    sampler = gm.text.Sampler(model=loaded.model, params=loaded.params, tokenizer=loaded.tokenizer,
                              cache_length=512, max_out_length=n, pad_length=None)

    def rate() -> float:
        t0 = time.perf_counter()
        out = sampler.sample(text, max_new_tokens=n, return_state=True)
        made = int((out.state.predicted_tokens != 0).sum())
        return made / (time.perf_counter() - t0)

    return rate


@measure("decode_270m", quick=False)
def decode_270m(quick: bool = False) -> list[Row]:
    """A/B decode tokens/s a side (f32, bf16 copy, int8 base) vs gm.text.Sampler and llama.cpp."""
    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec, ModelSpec
    from adapters_lib.models import starter
    from adapters_lib.models.loader import generation_copy, load_model
    from adapters_lib.sample.prompts import format_chat
    from adapters_lib.sample.settings import SamplingSettings
    from adapters_lib.tuned.gemma import GemmaTuned

    n, reps = (32, 2) if quick else (64, 3)
    spec = LoraSpec(rank=8, alpha=16.0, targets=("q", "v", "down"))
    base = load_model(ModelSpec(source="starter:gemma-3-270m"))
    ad = lora.init_lora(base.model, spec, base.params, jax.random.key(1))
    ad = jax.tree.map(lambda x: x + 0.001, ad)
    variants = {"f32": base, "f32 decode layout": generation_copy(base, "float32"),
                "bf16": generation_copy(base, "bfloat16"),
                "int8": load_model(ModelSpec(source="starter:gemma-3-270m", quantize="int8")),
                "int8+bf16": load_model(ModelSpec(source="starter:gemma-3-270m", quantize="int8"),
                                        generation_dtype="bfloat16")}
    settings = SamplingSettings(max_new_tokens=n)
    ours = {}
    for key, loaded in variants.items():
        dtype = "bfloat16" if "bf16" in key else "float32"
        model = GemmaTuned(loaded, lora=spec, adapters=jax.tree.map(lambda x, d=dtype: x.astype(d), ad))

        def run(model=model) -> dict[str, Any]:
            got = model.generate({"base": [PROMPT], "tuned": [PROMPT]}, settings)
            return {s: got[s][0] for s in ("base", "tuned")}

        ours[key] = run
    text = format_chat([{"role": "user", "content": PROMPT}])
    refs: dict[str, Any] = {"gm.text.Sampler": _gm_rate(base, text, n)}
    llm = _llama(starter.ensure_starter())
    if llm is not None:
        refs["llama.cpp"] = lambda: _llama_rate(llm, text, n)[1]
    for fn in (*ours.values(), *refs.values()):
        fn()  # compile / warm up
    samples: dict[str, list[Any]] = {k: [] for k in (*ours, *refs)}
    for _ in range(reps):  # alternating
        for key, fn in ours.items():
            samples[key].append(fn())
        for key, fn in refs.items():
            samples[key].append(fn())
    side = {k: {s: statistics.median(a[s].tokens_per_s for a in v) for s in ("base", "tuned")}
            for k, v in samples.items() if k in ours}
    tokens = {k: {s: v[-1][s].tokens for s in ("base", "tuned")} for k, v in samples.items() if k in ours}
    ref_rate = {k: statistics.median(v) for k, v in samples.items() if k in refs}
    rows = []
    llama = ref_rate.get("llama.cpp")
    held = {"int8+bf16": "the int8 base's generation copy: its int8 tiles read by int8 × int8 dots, the "
                         "activation quantized per tile at the dot, the table one int8 row a token "
                         "(KL to the f32 logits ~0.01 nats a position, weight-only int8 ~0.002); "}
    for key in ours:
        worst = min(side[key].values())
        note = (held.get(key, "") + f"real 270M, A/B one batched computation (LoRA r8 q/v/down unmerged), greedy, {n} new "
                f"tokens (made: base {tokens[key]['base']}, tuned {tokens[key]['tuned']}); decode rate "
                f"after the first token, base {side[key]['base']:.1f} / tuned {side[key]['tuned']:.1f} "
                f"tok/s; median of {reps}, alternating with the references")
        if llama:
            rows.append(_row(f"A/B decode tokens/s a side, {key} base, vs llama.cpp (real 270M)", worst, llama,
                             unit="tok/s", target="≥ 0.5×", ref_name="llama.cpp Q4_K_M, 2 threads",
                             note=note + "; llama.cpp: the same GGUF, one stream, decode after the first token"))
        rows.append(_row(f"A/B decode tokens/s a side, {key} base, vs gm.text.Sampler (real 270M)", worst,
                         ref_rate["gm.text.Sampler"], unit="tok/s", target="", ref_name="gm.text.Sampler f32",
                         note=note + "; gm: one model, f32, its tokens over its whole call (prefill "
                                     "unpadded)"))
    if llama is None:
        rows.append(Row(measure="A/B decode vs llama.cpp (real 270M)", note=f"llama-cpp-python not built in "
                        f"{LLAMA_CPP_DIR} (scripts/build_llama_cpp.sh): not measured"))
    rows.append(_row("A/B tokens/s a side, int8 base vs bf16 (real 270M)", min(side["int8+bf16"].values()),
                     min(side["bf16"].values()), unit="tok/s", target="≥ 1.5×", ref_name="bf16 copy",
                     note="the int8 base's bf16 generation copy (int8 × int8 dots) vs the bf16 copy"))
    return rows
