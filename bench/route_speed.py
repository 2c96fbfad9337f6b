"""The two routes side by side: the same model, data, batch and LoRA trained by the gemma route's
step and by the Keras route's ``fit`` loop, each through its real trainer (``train.run_training``:
data pipeline, metrics, the run directory), tokens/s and MFU a route.

``python -m bench.route_speed --config TOML [--set KEY=VALUE ...] [--steps N] [--out DIR]``

Both runs take the config as given, with ``model.backend`` set per route, ``data.packing`` off
(the Keras route trains one example per row, so the gemma route must too for the same batches),
``train.programs = "exact"`` (the gemma route's own rank, not an accelerator's padded rank
family), one eval at the end, no exact-match, one checkpoint. From each run's metrics.jsonl:
the median ``step_time_s`` over the steps after the first ``--skip`` (compile and warm-up),
tokens/s of real tokens (the loss-masked rows' non-padding tokens, as the runs log them) and of
padded positions (batch × max_length: what the chip computes), and MFU: the LoRA step's FLOPs
written down (``bench.mfu.lora_step_flops``, the same formula for both) over the step time,
against the chip's bf16 peak (``bench.tpu_speed.PEAK_BF16_TFLOPS``; none on a CPU).
Results: ``DIR/route_speed.json`` and a line a route on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.outdir import default_out

ROUTES = ("gemma", "keras")


def route_config(cfg: Any, backend: str, steps: int) -> Any:
    """``cfg`` for one route of the comparison (see the module docstring)."""
    import dataclasses

    t = dataclasses.replace(cfg.train, steps=steps, eval_every=steps, checkpoint_every=steps,
                            eval_exact_match=0, eval_batches=1, log_every=1, programs="exact")
    return cfg.replace(model=dataclasses.replace(cfg.model, backend=backend),
                       data=dataclasses.replace(cfg.data, packing=False), train=t,
                       run=dataclasses.replace(cfg.run, name=f"{cfg.run.name or 'speed'}-{backend}"))


def summarize(records: list[dict[str, Any]], *, batch: int, seq: int, skip: int, flops: float,
              peak_tflops: float | None) -> dict[str, Any]:
    """A route's row from its per-step metrics records (pure)."""
    steady = [r for r in records if "step_time_s" in r and r.get("step", 0) > skip]
    if not steady:
        raise ValueError(f"no step after the first {skip} has a step_time_s")
    step_s = statistics.median(r["step_time_s"] for r in steady)
    real = statistics.median(r["tokens"] for r in steady if "tokens" in r) if any(
        "tokens" in r for r in steady) else None
    tflops = flops / step_s / 1e12
    return {"steps_timed": len(steady), "step_time_s": round(step_s, 5),
            "tokens_per_s": None if real is None else round(real / step_s, 1),
            "padded_tokens_per_s": round(batch * seq / step_s, 1), "tflops": round(tflops, 4),
            "mfu": None if not peak_tflops else round(tflops / peak_tflops, 5)}


def _peak() -> tuple[str, float | None]:
    import jax

    from bench.tpu_speed import peak_of

    d = jax.devices()[0]
    return getattr(d, "device_kind", d.platform), peak_of(d)


def _flops(cfg: Any) -> float:
    from adapters_lib import catalog
    from bench.mfu import lora_step_flops

    if cfg.model.source == "demo":
        from adapters_lib.models import demo

        config = demo.demo_transformer_config()
    else:
        config = catalog.resolve(cfg.model.source).arch.transformer_config()
    return lora_step_flops(config, batch=cfg.train.batch_size, seq=cfg.data.max_length)


def train_route(cfg: Any, root: Path) -> tuple[list[dict[str, Any]], float]:
    """Train ``cfg`` in a fresh run under ``root``; its metrics records and wall seconds."""
    from adapters_lib.runs import create_run
    from adapters_lib.train.loop import run_training

    run = create_run(cfg, root=root)
    t0 = time.perf_counter()
    run_training(cfg, run)
    wall = time.perf_counter() - t0
    lines = (run.path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()], wall


def compare_routes(cfg: Any, *, steps: int, skip: int, root: Path) -> dict[str, Any]:
    kind, peak = _peak()
    flops = _flops(cfg)
    out: dict[str, Any] = {"device": kind, "peak_bf16_tflops": peak, "model": cfg.model.source,
                           "batch": cfg.train.batch_size, "seq": cfg.data.max_length,
                           "lora": f"r{cfg.lora.rank} {','.join(cfg.lora.targets)}",
                           "compute_dtype": cfg.train.compute_dtype, "steps": steps,
                           "step_flops": flops, "routes": {}}
    for backend in ROUTES:
        rc = route_config(cfg, backend, steps)
        records, wall = train_route(rc, root)
        row = summarize(records, batch=rc.train.batch_size, seq=rc.data.max_length, skip=skip,
                        flops=flops, peak_tflops=peak)
        row["wall_s"] = round(wall, 1)
        out["routes"][backend] = row
        print(f"[speed] {backend}: {json.dumps(row)}", file=sys.stderr, flush=True)
    g, k = out["routes"]["gemma"], out["routes"]["keras"]
    out["keras_over_gemma_step_time"] = round(k["step_time_s"] / g["step_time_s"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.route_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=5, help="steps left out of the timing (compile, warm-up)")
    p.add_argument("--out", default=default_out("route_speed"))
    a = p.parse_args(argv)
    from adapters_lib.config.model_defaults import load_with_model_defaults
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.preimport_quietly()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if a.steps <= a.skip + 1:
            raise WorkbenchError(f"--steps {a.steps} leaves no step to time after --skip {a.skip}",
                                 where="--steps", hint=f"use --steps {a.skip + 10} or more")
        cfg = load_with_model_defaults(a.config, a.set).config  # as `train` loads it
        result = compare_routes(cfg, steps=a.steps, skip=a.skip, root=out / "runs")
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    (out / "route_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
