"""The memory plan of docs/multihost.md: ``python -m bench.multihost_plan`` prints the table.

Each Gemma size × accelerator target with LoRA rank 16 on every projection, bf16 weights and
compute, f32 adapters, one sequence of 2048 per chip, the weights on ``fsdp`` over every chip
(``memory.estimate``, the estimator the engine uses).
"""

from __future__ import annotations

import sys
from typing import Any

from adapters_lib.multihost import per_host_summary

# Accelerator targets of the memory plan: (name, hosts, chips per host, bytes per chip).
PLAN_TARGETS = (
    ("v5e-8", 1, 8, 16 * 2**30),
    ("v5e-16", 4, 4, 16 * 2**30),
    ("v5p-8", 1, 4, 95 * 2**30),
    ("1× H100", 1, 1, 80 * 2**30),
)
PLAN_MODELS = ("Gemma3_1B", "Gemma3_4B", "Gemma3_12B", "Gemma3_27B", "Gemma4_31B")


def plan_rows(*, rank: int = 16, seq_len: int = 2048, remat: bool = True) -> list[dict[str, Any]]:
    """The memory plan: each model × target with LoRA ``rank`` on every projection, bf16
    weights and compute, f32 adapters, one sequence of ``seq_len`` per chip, the weights on
    ``fsdp`` over every chip of the job (``memory.estimate``, the estimator the engine uses)."""
    from gemma import gm

    from adapters_lib.memory import estimate as memory

    rows = []
    for name in PLAN_MODELS:
        model = getattr(gm.nn, name, None)
        if model is None:
            continue
        config = model.config
        for target, hosts, chips, hbm in PLAN_TARGETS:
            n = hosts * chips
            est = memory.estimate(config, batch_size=n, seq_len=seq_len, mesh_shape=(1, n, 1),
                                  lora_rank=rank, lora_dtype="float32", param_dtype="bfloat16",
                                  compute_dtype="bfloat16", remat=remat, device_bytes=hbm)
            rows.append({"model": name, "target": target, "hosts": hosts, "chips": n,
                         "mesh": f"fsdp={n}", "estimate": est,
                         "per_host": per_host_summary(est, global_devices=n, processes=hosts)})
    return rows


def plan_table(**kwargs: Any) -> str:
    """``plan_rows`` as a markdown table."""
    from adapters_lib.memory import fmt_bytes

    out = ["| model | target | hosts × chips | weights/chip | adapters+opt/chip | activations/chip "
           "| total/chip | of HBM | per host | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in plan_rows(**kwargs):
        e = r["estimate"]
        ph = r["per_host"]
        out.append(
            f"| {r['model'].replace('_', ' ')} | {r['target']} | {r['hosts']} × "
            f"{ph['devices_per_host']} | {fmt_bytes(e.weights + e.compute_copy)} | "
            f"{fmt_bytes(e.adapters + e.gradients + e.optimizer)} | "
            f"{fmt_bytes(e.activations + e.logits + e.batch)} | {fmt_bytes(e.total)} | "
            f"{e.fraction:.0%} | {fmt_bytes(ph['bytes_per_host'])} | {e.verdict} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(plan_table())
    sys.exit(0)
