"""Memory fit: the estimate (``adapters_lib.memory``) against XLA's own figure for the real step.

For each shape (a Gemma 3 release's config, batch × seq, remat on/off; LoRA r16 on every
projection, f32 adapters, bf16 base and compute, as ``bench.mfu`` trains) the project's own
``build_steps`` is built from abstract weights (``jax.ShapeDtypeStruct``: nothing is
materialised) and only compiled: ``Steps.compiled_memory`` gives XLA's argument, output, temp,
alias and generated-code bytes, whose total (argument + output + temp − alias) the estimate is
held against. Each row prints the estimate's terms, XLA's parts, the relative error and the
verdict against the chip, everything needed to refit the coefficients from one run.

Targets: the devices this process has (``--target local``: the TPU on a TPU VM, the CPU here),
or a TPU chip compiled for without it (``--target v5e``: XLA:TPU's deviceless ahead-of-time
compiler, which needs ``libtpu`` importable, e.g. ``PYTHONPATH=<unpacked libtpu wheel>``; the
figures equal the chip's, see docs/mesh-and-memory.md).

    python -m bench.memory_fit                       # the TPU set on this machine's devices
    python -m bench.memory_fit --target v5e --models 1b --batches 8
    python -m bench.memory_fit --models demo --batches 2 8 --seq 128 --remat both   # CPU, ~1 min
    python -m bench --only memory_fit                # the rows into BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from typing import Any

from bench.measures import _cfg, measure
from bench.report import Row

MODELS = {"demo": None, "270m": "Gemma3_270M", "1b": "Gemma3_1B", "4b": "Gemma3_4B"}
TOPOLOGIES = {"v5e": "v5e:1x1", "v6e": "v6e:1x1", "v4": "v4:1x1x1", "v5p": "v5:1x1x1"}
"""Single-chip TPU topologies the deviceless compiler takes (``--target``)."""
ERROR_TARGET = 0.10
XLA_KEYS = ("argument", "output", "temp", "alias", "generated_code", "total")


def text_model(name: str) -> Any:
    """The Gemma model of ``MODELS[name]``, text only (bf16 compute); the demo for ``demo``.

    Built from the workbench's own table of the release's config (``families.KNOWN``, checked
    against gemma's by tests/test_catalog.py; equal to ``gm.nn.<MODELS[name]>``'s): the module
    of ``gm.nn.Gemma3_1B`` imports ``gm.ckpts``, whose trainer needs TensorFlow, absent from a
    lean TPU install."""
    import jax.numpy as jnp

    if MODELS[name] is None:
        from adapters_lib.models import demo

        return demo.demo_model("bfloat16")
    from adapters_lib.models import families

    _, arch = families.KNOWN[("gemma3", name)]
    return families.model_class(arch)(dtype=jnp.bfloat16)


def target_devices(target: str) -> list:
    """The devices to compile for: this process's (``local``) or a TPU chip's, deviceless."""
    import jax

    if target == "local":
        return jax.devices()[:1]
    if target not in TOPOLOGIES:
        raise SystemExit(f"--target {target}: expected local or one of {', '.join(TOPOLOGIES)}")
    from jax.experimental.topologies import get_topology_desc

    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    try:
        topo = get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[target],
                                 chip_config_name="default", chips_per_host_bounds=(1, 1, 1), num_slices=1)
    except Exception as e:  # noqa: BLE001 - no libtpu here: say how to get it
        raise SystemExit(f"--target {target}: no deviceless TPU compiler ({type(e).__name__}: {e}); "
                         "put an unpacked libtpu wheel on PYTHONPATH (pip download libtpu, then unzip) "
                         "or run with --target local on the chip") from None
    return topo.devices[:1]


def point(model: Any, device: Any, *, batch: int, seq: int, remat: bool, rank: int = 16,
          grad_accum: int = 1, ce_kernel: str | None = None) -> dict:
    """XLA's memory analysis of one compiled LoRA train step and the estimate's terms for it."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora, memory
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.memory import device as device_memory
    from adapters_lib.train.optimizer import make_optimizer
    from adapters_lib.train.step import build_steps

    cfg = _cfg(lora={"rank": rank, "alpha": 2.0 * rank, "targets": ["all"], "dtype": "float32"},
               train={"batch_size": batch, "remat": remat, "grad_accum": grad_accum,
                      "compute_dtype": "bfloat16", "param_dtype": "bfloat16"},
               data={"max_length": seq})
    tokens = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda r: model.init(r, tokens)["params"], jax.random.key(0))
    base = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), shapes)  # as load_model casts
    adapters = jax.eval_shape(lambda r: lora.init_lora(model, cfg.lora, base, r), jax.random.key(1))
    chip = device_memory.chip_for_device(device)
    device_bytes = chip.usable_bytes if chip else device_memory.device_memory_bytes(device)
    ce_budget = memory.ce_chunk_budget_for(device.platform, device_bytes)
    mesh = mesh_lib.make_mesh(cfg.mesh.resolve(1), [device])
    t = time.perf_counter()
    with _abstract_placement(device):
        steps = build_steps(model, cfg, make_optimizer(cfg.train), mesh, base, adapters, seq_len=seq,
                            ce_chunk_bytes=ce_budget, ce_kernel=ce_kernel)
    try:
        xla = steps.compiled_memory((batch, seq))
    except Exception as e:  # noqa: BLE001 - XLA:TPU refuses a step over the chip: read its figure
        xla = _from_oom(str(e), steps, (batch, seq))
    compile_s = time.perf_counter() - t
    est = memory.estimate_run(cfg, model.config, device_count=1, device_bytes=device_bytes,
                              seq_len=seq, ce_chunk_bytes=ce_budget, platform=device.platform)
    return {"batch": batch, "seq": seq, "remat": remat, "grad_accum": grad_accum, "rank": rank,
            "platform": device.platform, "device_kind": getattr(device, "device_kind", ""),
            "device_bytes": device_bytes, "ce_chunk_bytes": ce_budget, "ce_chunk": steps.ce_chunk,
            "ce_kernel": steps.ce_kernel,
            "compile_s": round(compile_s, 1), "xla": xla,
            "estimate": {t_: getattr(est, t_) for t_ in memory.TERMS} | {"total": est.total},
            "error": est.total / xla["total"] - 1, "verdict": est.verdict,
            "xla_verdict": _verdict(xla["total"], device_bytes)}


OOM = re.compile(r"HLO temporaries \(([\d.]+)([KMGT])\)")


def _from_oom(message: str, steps: Any, batch_shape: tuple[int, int]) -> dict[str, int]:
    """XLA's parts of a step XLA:TPU would not compile (over the chip's memory): the temp from its
    message ("HLO temporaries (25.56G) exceeds available HBM (15.75G)"), the arguments from their
    shapes; the donated state is the output it aliases. Any other error is raised again."""
    import math

    import jax

    m = OOM.search(message)
    if not m:
        raise RuntimeError(message[:600])
    temp = int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2)))
    leaves = jax.tree.leaves((steps.abstract_state, steps.base_params))
    argument = sum(math.prod(x.shape) * x.dtype.itemsize for x in leaves)
    argument += len(steps.keys) * 4 * math.prod(batch_shape)
    state = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(steps.abstract_state))
    return {"temp": temp, "argument": argument, "output": state, "alias": state, "generated_code": 0,
            "total": temp + argument, "from_oom_message": 1}


@contextlib.contextmanager
def _abstract_placement(device: Any):
    """``build_steps`` places its few scalars (the optimizer's hparams) on the mesh; a deviceless
    target has no memory to place them in, so there they stay abstract (enough to compile)."""
    import jax

    if getattr(device, "client", None) is not None and device in jax.devices():
        yield
        return
    real = jax.device_put

    def abstract(x, sharding=None, **_):
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(jax.numpy.shape(a), jax.numpy.result_type(a),
                                                           sharding=sharding), x)

    jax.device_put = abstract
    try:
        yield
    finally:
        jax.device_put = real


def _verdict(total: int, device_bytes: int) -> str:
    from adapters_lib.memory import FIT_FRACTION

    if not device_bytes:
        return "unknown"
    frac = total / device_bytes
    return "fits" if frac < FIT_FRACTION else "tight" if frac <= 1.0 else "exceeds"


def line(name: str, p: dict) -> str:
    """One row for the terminal: shape, XLA's total and parts, the estimate and its terms."""
    gib = 2**30
    x, e = p["xla"], p["estimate"]
    accum = f" accum={p['grad_accum']}" if p["grad_accum"] > 1 else ""
    terms = " ".join(f"{k}={v / gib:.3f}" for k, v in e.items() if v and k != "total")
    return (f"{name} B{p['batch']}×{p['seq']} remat={'on' if p['remat'] else 'off'}"
            f"{accum}: "
            f"XLA {x['total'] / gib:.3f} GiB (arg {x['argument'] / gib:.3f} out {x['output'] / gib:.3f} "
            f"temp {x['temp'] / gib:.3f} alias {x['alias'] / gib:.3f} code {x['generated_code'] / 2**20:.1f} MiB) | "
            f"estimate {e['total'] / gib:.3f} GiB ({100 * p['error']:+.1f} %) [{terms}] | "
            f"chip {p['device_bytes'] / gib:.2f} GiB: estimate {p['verdict']}, XLA {p['xla_verdict']} "
            f"| CE chunk {p['ce_chunk']} ({p.get('ce_kernel', 'xla')}) | compile {p['compile_s']} s")


DEFAULT_SET = [("270m", (1, 2, 4, 8)), ("1b", (1, 2, 4, 8)), ("4b", (1, 2))]


def run(models: list[str], batches: list[int] | None, seq: int, remats: list[bool], target: str,
        out: str | None = None, grad_accum: int = 1, ce_kernel: str | None = None) -> list[dict]:
    device = target_devices(target)[0]
    print(f"[memory_fit] target {target}: {device.platform} {getattr(device, 'device_kind', '')}",
          file=sys.stderr, flush=True)
    results = []
    for name in models:
        model = text_model(name)
        for b in batches or dict(DEFAULT_SET).get(name, (1, 2, 4, 8)):
            for remat in remats:
                try:
                    p = point(model, device, batch=b, seq=seq, remat=remat, grad_accum=grad_accum,
                              ce_kernel=ce_kernel)
                except Exception as e:  # noqa: BLE001 - one shape's failure is a row, not the end
                    print(f"{name} B{b}×{seq} remat={remat}: failed: {type(e).__name__}: {str(e)[:400]}",
                          flush=True)
                    continue
                p["model"] = name
                results.append(p)
                print(line(name, p), flush=True)
                if out:
                    with open(out, "w") as f:
                        json.dump(results, f, indent=1)
    return results


@measure("memory_fit", quick=False)
def memory_fit(quick: bool = False) -> list[Row]:
    """Estimate vs XLA's compiled memory analysis of the real step (bf16, LoRA r16), per shape."""
    import jax

    on_tpu = jax.devices()[0].platform == "tpu"
    if on_tpu:
        shapes = [("1b", (8,) if quick else (1, 2, 4, 8))] + ([] if quick else [("270m", (8,)), ("4b", (1, 2))])
        seq = 2048
    else:  # here: the demo's shape, the CPU rows; the TPU rows are measured on the chip
        shapes, seq = [("demo", (2, 8))], 128
    rows = []
    for name, batches in shapes:
        for p in run([name], list(batches), seq, [False, True], "local"):
            err = abs(p["error"])
            rows.append(Row(
                measure=f"memory estimate vs XLA ({name} B{p['batch']}×{seq}, remat {'on' if p['remat'] else 'off'}, "
                        f"{p['platform']})",
                ours=p["estimate"]["total"] / 2**30, reference=p["xla"]["total"] / 2**30, unit="GiB",
                ratio=1 + p["error"], target=f"within {100 * ERROR_TARGET:.0f} %", met=err <= ERROR_TARGET,
                ref_name="compiled memory_analysis",
                note=f"{p['device_kind']} {p['device_bytes'] / 2**30:.2f} GiB: estimate {p['verdict']}, "
                     f"XLA {p['xla_verdict']}; temp {p['xla']['temp'] / 2**30:.2f} GiB"))
    return rows


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = argparse.ArgumentParser(prog="python -m bench.memory_fit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=[m for m, _ in DEFAULT_SET], choices=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=None,
                        help="default: 1 2 4 8 (4b: 1 2)")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--remat", choices=("off", "on", "both"), default="both")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--target", default="local", help=f"local, or {', '.join(TOPOLOGIES)} (deviceless)")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument("--ce-kernel", choices=("xla", "splash", "flash"), default=None,
                        help="the cross-entropy's kernel (build_steps ce_kernel; default the step's: "
                             "flash on a TPU, xla elsewhere)")
    args = parser.parse_args(argv)
    if args.target != "local":
        import jax

        jax.config.update("jax_platforms", "cpu")  # the TPU is a compile target, not a device
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    remats = {"off": [False], "on": [True], "both": [False, True]}[args.remat]
    t = time.time()
    results = run(args.models, args.batches, args.seq, remats, args.target, args.out, args.grad_accum,
                  args.ce_kernel)
    errs = [abs(p["error"]) for p in results]
    if errs:
        print(f"[memory_fit] {len(errs)} shapes in {time.time() - t:.0f} s; |error| max "
              f"{100 * max(errs):.1f} %, mean {100 * sum(errs) / len(errs):.1f} %", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
