"""The requirements table of the README: ``python -m bench.requirements_table`` prints it.

Each Gemma size, LoRA rank 16 on every projection (f32 adapters, bf16 compute, remat, one
sequence of 1024 tokens) with the base in bf16 (LoRA) and in int4 (QLoRA, ``[model]
quantize``: projections, expert banks and embedding tables), on one device: the per-device total of ``memory.estimate`` (the estimator the
engine and Configure's fit bar use) and whether it fits (under 80 % of the memory, as Configure's fit bar says; tight: under
100 %) a 16 GB TPU v5e chip, a 32 GB v6e
chip, a 24 GB and an 80 GB GPU. Estimated, not measured.
"""

from __future__ import annotations

import sys

MODELS = ("Gemma3_270M", "Gemma3_1B", "Gemma3_4B", "Gemma3_12B", "Gemma3_27B", "Gemma2_2B",
          "Gemma2_9B", "Gemma4_E2B", "Gemma4_E4B", "Gemma4_26B_A4B", "Gemma4_31B", "Gemma3n_E2B",
          "Gemma3n_E4B")
NOT_QUANTIZED_YET: tuple[str, ...] = ("Gemma3n",)
"""Models whose weights the quantized base does not reach yet: no QLoRA row (Gemma 3n: its
own Einsum layers are not read quantized)."""
DEVICES = (("v5e chip 16 GB", 16), ("24 GB GPU", 24), ("v6e chip 32 GB", 32), ("80 GB GPU", 80))


def rows(*, rank: int = 16, seq_len: int = 1024) -> list[tuple[str, str, float]]:
    from gemma import gm

    from adapters_lib.memory import estimate as memory

    out = []
    for name in MODELS:
        model = getattr(gm.nn, name, None)
        if model is None:
            continue
        modes = [("LoRA bf16", "none")]
        if not name.startswith(NOT_QUANTIZED_YET):
            modes.append(("QLoRA int4", "int4"))
        for label, quantize in modes:
            try:
                est = memory.estimate(model.config, batch_size=1, seq_len=seq_len, lora_rank=rank,
                                      lora_dtype="float32", param_dtype="bfloat16",
                                      compute_dtype="bfloat16", remat=True, quantize=quantize)
            except Exception as err:  # a family the estimator does not know yet
                print(f"{name} {label}: {err}", file=sys.stderr)
                continue
            out.append((name.replace("_", " ").replace("Gemma", "Gemma "), label,
                        est.total / 2**30))
    return out


def table() -> str:
    from adapters_lib.memory import FIT_FRACTION

    lines = ["| model | base | per device (est.) | " + " | ".join(d for d, _ in DEVICES) + " |",
             "|---|---|---|" + "---|" * len(DEVICES)]
    for model, label, gib in rows():
        fits = ["fits" if gib < size * FIT_FRACTION else "tight" if gib <= size else "—"
                for _, size in DEVICES]
        lines.append(f"| {model} | {label} | {gib:.1f} GiB | " + " | ".join(fits) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
