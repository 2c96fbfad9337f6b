"""``first-step``: seconds from a new process to the first step's loss, cold then warm, and the
warm process's relaunches with its weights held (``first-step-once`` is one such process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import random_params, shape_model
from bench.tpu_speed.train_point import train_point


def first_step(out: Path) -> list[dict]:
    """Cold and warm seconds to the first step, each in a new process (the engine's caches on)."""
    import shutil
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="wb-cache-"))
    rows = []
    for label in ("cold", "warm"):
        env = dict(os.environ, GEMMA_WORKBENCH_COMPILE_CACHE=str(cache / "compile"),
                   GEMMA_WORKBENCH_PROGRAMS=str(cache / "programs"))
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "bench.tpu_speed", "first-step-once"] + (["--dry"] if shapes.DRY else [])
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        sys.stderr.write(res.stderr[-3000:])
        line = next((x for x in reversed(res.stdout.splitlines()) if x.startswith("{")), "{}")
        rows.append(_row(f"time to first step, {label}", process_wall_s=wall, **json.loads(line)))
    shutil.rmtree(cache, ignore_errors=True)
    _dump(out, "first_step", rows)
    return rows


def first_step_once() -> None:
    t_start = time.perf_counter()
    import jax

    from adapters_lib.engine import devices
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    devices.enable_compile_cache(jax)
    jax.devices()
    t_jax = time.perf_counter() - t_start
    model = shape_model("1b")
    base = random_params(model)
    jax.block_until_ready(base)
    t_weights = time.perf_counter() - t_start
    b, seq = (2, 128) if shapes.DRY else (4, 2048)
    p = train_point(model, base, batch=b, seq=seq, steps=0, memory=False)
    from adapters_lib import program_store
    from adapters_lib.train import step_programs

    first = {"jax_ready_s": t_jax, "weights_s": t_weights - t_jax, "build_to_first_loss_s": p["first_step_s"],
             "from_process_start_s": time.perf_counter() - t_start, "program_store": dict(program_store.stats)}
    # a launch in the running engine, weights held: the programs this process keeps (the
    # engine's next run of these shapes), then the program store read back (the first run of
    # these shapes in an engine that ran them before a restart)
    kept = train_point(model, base, batch=b, seq=seq, steps=0, memory=False)["first_step_s"]
    step_programs.forget()
    stored = train_point(model, base, batch=b, seq=seq, steps=0, memory=False)["first_step_s"]
    print(json.dumps({**first, "relaunch_kept_s": kept, "relaunch_store_s": stored,
                      "program_store_after": program_store.stats, "batch": b, "seq": seq}), flush=True)
