"""``memory``: ``bench.memory_fit`` at the 1B shape (the estimate against XLA's compiled figures,
batch 2/4/8, remat off and on), in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _row


def memory(out: Path) -> list[dict]:
    # the 1B shape at seq 2048, batch 2/4/8, remat off and on (6 compiles of ~1-1.5 min: one
    # device call; batch 8 without remat is XLA's refusal, whose figure is read); the whole
    # default set (270M, 1B, 4B) is ~20 compiles: `python -m bench.memory_fit` there by hand.
    # --dry: the demo on the CPU
    cmd = [sys.executable, "-m", "bench.memory_fit", "--out", str(out / "memory_fit.json")] + (
        ["--models", "demo", "--batches", "2", "--seq", "128", "--remat", "off"] if shapes.DRY
        else ["--models", "1b", "--batches", "2", "4", "8", "--remat", "both"])
    res = subprocess.run(cmd, check=False)
    return [_row("memory_fit", returncode=res.returncode)]
