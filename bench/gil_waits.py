"""What a thread computing in Python costs the device thread's work beside it: each time
that work gives the GIL up (a transfer, a dispatch, a ``jax.Array`` dying) it waits to have it
back, up to the interpreter's switch interval.

``python -m bench.gil_waits [--out DIR] [--dry] [--reps N]``: a thread busy in Python bytecode
(what a compile job's trace is, between its native calls) beside:
- ``step``: one LoRA train step at the Gemma-3-1B shape (``--dry``: its reduced shape, 171
  state arrays, batch 2 × 64; without it the full shape at 2 × 2048, for a TPU), the batch
  placed, the loss fetched, the donated state dropped here or handed to ``train.reaper``;
- ``eval``: ``eval --run`` of a 3-step demo run on ``examples/answer-format/eval.jsonl``.

Each at Python's 5 ms switch interval and at the engine's 0.5 ms (``engine.daemon``), against
the same work alone; medians in ms. Results: ``DIR/gil_waits.json``. Run it a few times: on 2
CPU cores whether the busy thread takes the GIL at each give-up differs from one process to the
next (the step beside it at 5 ms: 25–39 ms in some processes, 158–205 ms in others).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.outdir import default_out


def _log(*parts: Any) -> None:
    print("[gil]", *parts, file=sys.stderr, flush=True)


class _Busy:
    """A thread in Python bytecode until stopped: the GIL held but at each switch interval."""

    def __enter__(self) -> _Busy:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="busy", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        x = 0
        while not self._stop.is_set():
            for i in range(1000):
                x += i

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _median_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _step_work(dry: bool) -> tuple[Any, Any, int]:
    """(one step dropping its donated state here, the same handing it to the reaper, arrays)."""
    import jax
    import numpy as np

    from adapters_lib.train import reaper
    from bench import family_cost
    from bench.measures import _random_batch
    from bench.tpu_speed import shapes
    from bench.tpu_speed.shapes import random_params, shape_model

    shapes.DRY = dry
    batch, seq = (2, 64) if dry else (2, 2048)  # 4 × 2048 without remat does not fit 16 GiB (family_cost)
    model = shape_model("1b")
    base = random_params(model)
    data = _random_batch(np.random.default_rng(0), batch, seq, model.config.num_embed)
    steps, trainable = family_cost._steps(model, base, family_cost.SPECS["r16-all"], "exact", batch, seq,
                                          family_cost._one_mesh())
    holder = {"state": steps.init_state(trainable)}

    def step(hand_over: bool) -> None:
        donated, placed = holder["state"], steps.put_batch(data)
        holder["state"], metrics = steps.train_step(donated, placed)
        if hand_over:
            reaper.drop((donated, placed))
        del donated, placed
        float(np.asarray(metrics["loss"]))

    for _ in range(3):
        step(False)
    return (lambda: step(False)), (lambda: step(True)), len(jax.tree.leaves(holder["state"]))


def _eval_work() -> Any:
    """``eval --run`` of a 3-step demo run, made here (no test fixtures: the chip has no pytest)."""
    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals import perplexity
    from adapters_lib.train.loop import run_training

    root = Path(tempfile.mkdtemp(prefix="gil-waits-"))
    cfg = load_config(None, ['run.name="gil"', f'run.dir="{root}"', "mesh.devices=1", "data.max_length=64",
                             "train.steps=3", "train.batch_size=8", "train.eval_exact_match=0",
                             "train.log_every=1"])
    run = runs.create_run(cfg)
    run_training(cfg, run)
    data = str(Path(__file__).resolve().parents[1] / "examples" / "answer-format" / "eval.jsonl")

    def ev() -> None:
        perplexity.evaluate(run=str(run.path), data=data)

    ev()
    return ev


def measure(dry: bool, reps: int) -> dict[str, Any]:
    step_here, step_reaped, arrays = _step_work(dry)
    work = {"step, its state dropped here": step_here, "step, its state to the reaper": step_reaped,
            "eval --run (demo)": _eval_work()}
    before = sys.getswitchinterval()
    rows = []
    try:
        for name, fn in work.items():
            alone = _median_ms(fn, reps)
            row = {"work": name, "alone_ms": round(alone, 2)}
            for interval in (0.005, 0.0005):
                sys.setswitchinterval(interval)
                with _Busy():
                    row[f"beside_busy_{interval * 1e3:g}ms_ms"] = round(_median_ms(fn, reps), 2)
                sys.setswitchinterval(before)
            rows.append(row)
            _log(f"{name}: alone {alone:.1f} ms, beside a busy thread {row['beside_busy_5ms_ms']:.1f} ms "
                 f"(5 ms interval), {row['beside_busy_0.5ms_ms']:.1f} ms (0.5 ms)")
    finally:
        sys.setswitchinterval(before)
    return {"state_arrays": arrays, "dry": dry, "reps": reps, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gil_waits")
    p.add_argument("--out", type=Path, default=Path(default_out("gil_waits")))
    p.add_argument("--dry", action="store_true")
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args(argv)
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    res = measure(a.dry, a.reps)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gil_waits.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
