"""``python -m bench.tpu_speed NAME [--out DIR] [--dry]``: one check (the package's doc lists them)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import tpu_speed
from bench.outdir import default_out
from bench.tpu_speed import shapes
from bench.tpu_speed.behind import behind
from bench.tpu_speed.big import big
from bench.tpu_speed.ce import ce
from bench.tpu_speed.decode import decode
from bench.tpu_speed.first_step import first_step, first_step_once
from bench.tpu_speed.memory import memory
from bench.tpu_speed.ratio import ratio
from bench.tpu_speed.speed import speed


def _log(*parts: Any) -> None:
    print("[tpu]", *parts, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tpu_speed", description=tpu_speed.__doc__.split("\n\n")[0])
    p.add_argument("name", choices=("speed", "ce", "ratio", "first-step", "first-step-once", "big", "decode", "memory",
                                    "behind"))
    p.add_argument("--out", default=default_out("tpu"))
    p.add_argument("--dry", action="store_true", help="the demo model's shape on this machine's CPU")
    a = p.parse_args(argv)
    shapes.DRY = a.dry
    if not shapes.DRY:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()
    out = Path(a.out)
    fn = {"speed": speed, "ce": ce, "ratio": ratio, "first-step": first_step, "big": big, "decode": decode, "memory": memory,
          "behind": behind}.get(a.name)
    if fn is None:
        first_step_once()
        return 0
    t = time.perf_counter()
    fn(out)
    _log(f"{a.name} took {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
