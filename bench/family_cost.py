"""What a LoRA program family costs a step: the family's program against the exact one,
side by side in one process on one device.

``python -m bench.family_cost [--out DIR] [--dry] [--steps N]``: at the Gemma-3-1B shape (random
bf16 weights and tokens, 4 × 2048, LoRA f32 adapters, bf16 compute; ``--dry``: the demo model,
short rows, on any device), for each run spec — r16 on every target, and r8 on q and v — the exact
program (``train.programs = "exact"``) and the family's (``lora.family``: the rank padded to the
bucket, 128 on a TPU, every target present with the unchosen ones masked, alpha a runtime value).
The four programs compile in parallel threads (XLA's compile releases the GIL), then their steps
alternate; seconds a step are medians over rounds. Results: ``DIR/family_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.outdir import default_out

SPECS = {"r16-all": {"rank": 16, "alpha": 32.0, "targets": ["all"]},
         "r8-qv": {"rank": 8, "alpha": 16.0, "targets": ["q", "v"]}}


def _log(*parts: Any) -> None:
    print("[family]", *parts, file=sys.stderr, flush=True)


def _steps(model: Any, base: Any, spec: dict, programs: str, batch: int, seq: int, mesh: Any) -> tuple[Any, Any]:
    import jax

    from adapters_lib import lora
    from adapters_lib.lora import family as lora_family
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps
    from bench.measures import _cfg

    cfg = _cfg(lora={**spec, "dtype": "float32"},
               train={"batch_size": batch, "compute_dtype": "bfloat16", "param_dtype": "bfloat16",
                      "learning_rate": 1e-4, "schedule": "constant", "warmup_steps": 0, "programs": programs},
               data={"max_length": seq})
    platform = jax.devices()[0].platform
    family = lora_family.resolve(cfg.lora, programs=programs, platform=platform)
    own = lora.init_lora(model, cfg.lora, base, jax.random.key(1))
    trainable = own if family is None else lora_family.fit(own, lora.adapter_shapes(model, family.program))
    steps = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, trainable, seq_len=seq,
                        family=family, compile_behind=False)
    return steps, trainable


def measure(*, dry: bool, rounds: int, steps_per_round: int, batch: int = 4) -> dict[str, Any]:
    import jax
    import numpy as np

    from bench.measures import _random_batch
    from bench.tpu_speed import random_params, shape_model, shapes

    shapes.DRY = dry
    seq = 64 if dry else 2048
    model = shape_model("1b")
    base = random_params(model)
    mesh = _one_mesh()
    data_host = _random_batch(np.random.default_rng(0), batch, seq, model.config.num_embed)
    built = {}
    for name, spec in SPECS.items():
        for programs in ("exact", "family"):
            built[(name, programs)] = _steps(model, base, spec, programs, batch, seq, mesh)
    # compile all four at once: each is ~90 s of mostly one-threaded XLA:TPU work
    t0 = time.perf_counter()

    def compile_one(key):
        steps, trainable = built[key]
        placed = steps.put_batch(data_host)
        abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.sharding) for k, v in placed.items()}
        t = time.perf_counter()
        f = steps._train.compile_behind(*steps._abstract_args("train", abstract, placed.slots))
        if f is not None:
            f.result()
        return key, time.perf_counter() - t

    with ThreadPoolExecutor(len(built)) as pool:
        compile_s = dict(pool.map(compile_one, built))
    _log(f"compiled {len(built)} programs in {time.perf_counter() - t0:.0f} s")
    states = {k: s.init_state(tr) for k, (s, tr) in built.items()}
    placed = {k: s.put_batch(data_host) for k, (s, _) in built.items()}
    times: dict[Any, list[float]] = {k: [] for k in built}
    for r in range(rounds + 1):
        for k, (steps, _) in built.items():
            t = time.perf_counter()
            for _ in range(steps_per_round):
                states[k], m = steps.train_step(states[k], placed[k])
            jax.block_until_ready(m["loss"])
            if r:  # the first round warms up
                times[k].append((time.perf_counter() - t) / steps_per_round)
    out: dict[str, Any] = {"device": jax.devices()[0].device_kind, "batch": batch, "seq": seq, "rows": []}
    for name in SPECS:
        exact = statistics.median(times[(name, "exact")])
        fam = statistics.median(times[(name, "family")])
        row = {"spec": name, "exact_s": exact, "family_s": fam, "ratio": fam / exact,
               "compile_exact_s": compile_s[(name, "exact")], "compile_family_s": compile_s[(name, "family")],
               "family": built[(name, "family")][0].family.describe()}
        out["rows"].append(row)
        _log(f"{name}: exact {exact * 1e3:.1f} ms, family {fam * 1e3:.1f} ms a step: {fam / exact:.3f}x")
    return out


def _one_mesh() -> Any:
    import jax

    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import MeshSpec

    return mesh_lib.make_mesh(MeshSpec(data=1, fsdp=1, tensor=1, devices=1), jax.devices()[:1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=default_out("family_cost"))
    p.add_argument("--dry", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=2, help="rows of 2048 (4 × 2048 without remat does not fit "
                   "16 GiB with the family's rank-128 adapters on every target: XLA's HBM check refused it)")
    a = p.parse_args(argv)
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()  # gemma's import chain names TensorFlow (absent on the chip: tf_absent)
    res = measure(dry=a.dry, rounds=a.rounds, steps_per_round=a.steps, batch=a.batch)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "family_cost.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
