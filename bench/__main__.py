"""``python -m bench [--quick] [--only NAME ...]``: measure ours vs the references, side by side.

Each comparison runs both sides in one process, alternately, after warm-up, and reports the
median of ≥ 5 repetitions as a ratio. Results go to ``BENCHMARKS.md`` (the table) and
``bench/results/latest.json`` (raw numbers). Benchmarks are not tests: CI times nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    cores = os.cpu_count()
    try:
        import jax

        dev = jax.devices()[0]
        accel = f"{dev.platform}:{getattr(dev, 'device_kind', '?')}×{jax.device_count()}"
    except Exception:  # noqa: BLE001 - report what we can
        accel = "?"
    return f"{platform.machine()} {cores} cores, {accel}"


def main(argv: list[str] | None = None) -> int:
    from bench import measures, report

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps/repetitions (< 10 min on 2 cores)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help=f"run only these: {', '.join(measures.MEASURES)}")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "latest.json"))
    args = parser.parse_args(argv)

    names = args.only or list(measures.MEASURES)
    unknown = [n for n in names if n not in measures.MEASURES]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(measures.MEASURES)}")

    previous = _load(Path(args.json))
    results = dict(previous.get("results", {})) if args.only else {}
    started = time.time()
    for name in names:
        print(f"[bench] {name} …", file=sys.stderr, flush=True)
        t = time.time()
        try:
            rows = measures.MEASURES[name](quick=args.quick)
        except Exception as e:  # noqa: BLE001 - a failed measure is reported, not fatal
            traceback.print_exc()
            rows = [report.Row(measure=name, note=f"failed: {type(e).__name__}: {e}")]
        for row in rows:
            row.seconds = round(time.time() - t, 1)
            results[row.measure] = row.to_dict()
            print(f"[bench]   {row.line()}", file=sys.stderr, flush=True)

    command = "python -m bench" + (" --quick" if args.quick else "") + (
        f" --only {' '.join(args.only)}" if args.only else "")
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": command,
        "wall_s": round(time.time() - started, 1),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    Path(args.out).write_text(report.render_markdown(meta, results))
    print(f"[bench] wrote {args.out} and {args.json} in {meta['wall_s']} s", file=sys.stderr)
    return 0


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
