"""Seconds XLA takes to compile the LoRA train step, under sets of libtpu flags side by side.

Each flag set compiles the step (``bench.memory_fit.point``: abstract weights, nothing placed)
in a fresh process, since libtpu reads ``LIBTPU_INIT_ARGS`` once; rows give the wall and CPU
seconds of the compile and XLA's memory figures (a flag that changes the program shows there).

    python -m bench.compile_time --model 1b --batch 4 --seq 2048 \\
        --flags none xla_tpu_impure_hlo_parallel_compile=true
    python -m bench.compile_time --target v5e ...     # deviceless, where libtpu is importable
    scripts/tpu_device.sh check compile               # on the chip: none vs COMPILE_FLAGS

What it found on a v5e (BENCHMARKS.md, "TPU v5e"): no flag brings the 1B step's compile
near 60 s; the parallel HLO passes save ~7 % but compile another program.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def flag_args(spec: str) -> str:
    """A flag set as ``--flags`` takes it (``name=value`` words, ``--`` optional; ``none``: no
    flag) as LIBTPU_INIT_ARGS reads it."""
    return " ".join("--" + f.lstrip("-") for f in spec.split() if f != "none")


def once(model: str, batch: int, seq: int, remat: bool, target: str) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import jax

    if target != "local":
        jax.config.update("jax_platforms", "cpu")
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    from bench import memory_fit

    t0 = time.perf_counter()
    dev = memory_fit.target_devices(target)[0]
    init_s = time.perf_counter() - t0

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    p = memory_fit.point(memory_fit.text_model(model), dev, batch=batch, seq=seq, remat=remat)
    return {"flags": os.environ.get("LIBTPU_INIT_ARGS", ""), "device_kind": getattr(dev, "device_kind", ""),
            "jax_init_s": round(init_s, 1), "build_and_compile_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(cpu() - c0, 1), "xla_total_gib": round(p["xla"]["total"] / 2**30, 3),
            "xla_temp_gib": round(p["xla"]["temp"] / 2**30, 3),
            "code_mib": round(p["xla"]["generated_code"] / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compile_time", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="1b")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--remat", action="store_true")
    ap.add_argument("--target", default="local")
    ap.add_argument("--flags", nargs="+", default=["none"],
                    help="one libtpu flag set per process: space-separated name=value ('--' optional), or none")
    ap.add_argument("--out", default=None)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.once:
        print(json.dumps(once(a.model, a.batch, a.seq, a.remat, a.target)), flush=True)
        return 0
    rows = []
    for spec in a.flags:
        flags = flag_args(spec)
        env = dict(os.environ, LIBTPU_INIT_ARGS=" ".join(filter(None, [os.environ.get("LIBTPU_INIT_ARGS", ""), flags])))
        cmd = [sys.executable, "-m", "bench.compile_time", "--once", "--model", a.model, "--batch", str(a.batch),
               "--seq", str(a.seq), "--target", a.target] + (["--remat"] if a.remat else [])
        t = time.perf_counter()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        line = next((x for x in reversed(res.stdout.splitlines()) if x.startswith("{")), None)
        row = json.loads(line) if line else {"flags": flags, "error": res.stderr[-800:]}
        row["process_s"] = round(time.perf_counter() - t, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
