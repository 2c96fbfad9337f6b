"""``python -m bench [--quick] [--only NAME ...]``: measure ours vs the references, side by side.

Each comparison runs both sides in one process, alternately, after warm-up, and reports the
median of ≥ 5 repetitions as a ratio. Results go to ``bench/results/latest.json`` (the numbers),
``bench/results/notes.md`` (each row's whole note) and ``BENCHMARKS.md``: each area's table is
rewritten between its ``<!-- bench:AREA … -->`` markers, the page around them kept (a file
without markers gets the tables alone). Benchmarks are not tests: CI times nothing.
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
    from adapters_lib.import_shields import tf_deferred

    tf_deferred.install()  # as the engine does (both sides of every row share it)
    if os.environ.get("BENCH_STUB_MISSING") == "1":
        from bench import import_stubs

        stood_in = import_stubs.install()
        if stood_in:
            print(f"[bench] standing in for missing packages: {', '.join(stood_in)}", file=sys.stderr)
    from bench import (  # noqa: F401 - each registers its measures
        catalog_scan,
        interactive_loop,
        measures,
        memory_fit,
        mfu,
        quantized_270m,
        quantized_lora,
        real_270m,
        report,
        ui_measures,
    )

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps/repetitions, and no demo-model twins of the real-270M rows "
                             "(< 15 min on 2 cores)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help=f"run only these: {', '.join(measures.MEASURES)}")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "latest.json"))
    parser.add_argument("--merge", nargs="+", default=None, metavar="FILE",
                        help="add the rows of results files measured elsewhere (e.g. bench/gpu_run.sh on a GPU "
                             "machine) to --json and rewrite --out; runs nothing")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.json), Path(args.out))

    names = selected(args.only, args.quick)
    unknown = [n for n in names if n not in measures.MEASURES]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(measures.MEASURES)}")

    previous = _load(Path(args.json))
    partial = bool(args.only) or len(names) < len(measures.MEASURES)  # what is not run keeps its rows
    results = dict(previous.get("results", {})) if partial else {}
    elsewhere = {k: v for k, v in previous.get("results", {}).items() if v.get("machine")}
    for row in results.values():  # rows kept from the last run keep the command and date that made them
        if row.get("machine"):  # measured elsewhere: its own command and date
            continue
        row.setdefault("run_command", previous.get("meta", {}).get("command", ""))
        row.setdefault("run_date", previous.get("meta", {}).get("date", ""))
    started = time.time()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")

    def write() -> None:  # after each measure: a run cut short keeps what it measured
        for key, row in elsewhere.items():  # rows measured on another machine stay until measured here
            if results.get(key, {}).get("ours") is None:
                results[key] = row
        command = "python -m bench" + (" --quick" if args.quick else "") + (
            f" --only {' '.join(args.only)}" if args.only else "")
        meta = {"date": date, "machine": machine(), "command": command, "wall_s": round(time.time() - started, 1)}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
        write_page(Path(args.out), Path(args.json), meta, results)
        print(f"[bench] wrote {args.out} and {args.json} ({meta['wall_s']} s so far)", file=sys.stderr)

    for name in names:
        print(f"[bench] {name} …", file=sys.stderr, flush=True)
        t = time.time()
        load = round(os.getloadavg()[0], 1)
        try:
            rows = measures.MEASURES[name](quick=args.quick)
        except Exception as e:  # noqa: BLE001 - a failed measure is reported, not fatal
            traceback.print_exc()
            rows = [report.Row(measure=name, note=f"failed: {type(e).__name__}: {e}")]
        for row in rows:
            row.seconds = round(time.time() - t, 1)
            row.run_command = "python -m bench" + (" --quick" if args.quick else "") + f" --only {name}"
            row.run_date, row.run_load = date, load
            results[row.measure] = row.to_dict()
            print(f"[bench]   {row.line()}", file=sys.stderr, flush=True)
        write()

    return 0


def selected(only: list[str] | None, quick: bool) -> list[str]:
    """The measures a run does: ``only`` as given, else every registered one (``--quick``: but the
    demo-model twins of the real-270M rows and the Keras row, ``measures.NOT_QUICK``)."""
    from bench import measures

    return list(only) if only else [n for n in measures.MEASURES if not (quick and n in measures.NOT_QUICK)]


def merge(files: list[str], json_path: Path, out: Path) -> int:
    """Add rows measured on another machine; each keeps that machine and date."""

    current = _load(json_path)
    results = dict(current.get("results", {}))
    for name in files:
        other = _load(Path(name))
        if not other.get("results"):
            print(f"[bench] {name}: no results in it", file=sys.stderr)
            return 2
        meta = other.get("meta", {})
        for key, row in other["results"].items():
            results[key] = {**row, "machine": meta.get("machine"), "date": meta.get("date"),
                            "command": meta.get("command")}
            print(f"[bench] merged {key} ({meta.get('machine')}, {meta.get('date')})", file=sys.stderr)
    json_path.write_text(json.dumps({"meta": current.get("meta", {}), "results": results}, indent=2) + "\n")
    write_page(out, json_path, current.get("meta", {}), results)
    return 0


def write_page(out: Path, json_path: Path, meta: dict, results: dict) -> None:
    """The tables into ``out`` (between their markers, when it has them) and every row's whole
    note beside the JSON (``notes.md``), which each row's note links to."""
    from bench import report

    notes = json_path.with_name("notes.md")
    notes.write_text(report.render_notes(meta, results), encoding="utf-8")
    page = out.read_text(encoding="utf-8") if out.is_file() else ""
    link = os.path.relpath(notes, out.resolve().parent)
    out.write_text(report.render_markdown(meta, results, page, link), encoding="utf-8")


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
