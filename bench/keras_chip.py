"""The Keras route on a chip, in one call (``scripts/tpu_device.sh check keras``); it runs here on
a CPU as well (``python -m bench.keras_chip --wb .venv/bin/gemma-workbench``).

``python -m bench.keras_chip [--out DIR] [--wb GEMMA_WORKBENCH] [--parts plan,flow,speed,tui]
[--speed-steps N]``; each part a child process, one after the other (the chip has one owner at
a time), each timed, a failed part leaving the others to run:

- ``plan``: ``bench.keras_plan`` for a v5e-8 (2 × 1, 1 × 2, … with the estimator's figures) →
  ``DIR/keras-plan-v5e-8.md``;
- ``flow``: the IMDB example through the CLI and the engine, as a user types it:
  ``train examples/seed-003-imdb.toml --set 'model.backend="keras"'`` (on the IMDB-shaped
  reviews of ``examples/seed-003/imdb_like.py`` as JSONL: the same 400 train and first 24 test
  rows its TFDS build holds; ``tfds:`` data is read through TensorFlow, which the device
  bundle leaves out), then ``compare`` on ``examples/seed-003/prompts.txt``, ``export --format adapter``,
  ``engine stop`` → ``DIR/keras-flow.log``, ``DIR/keras-adapter/``;
- ``speed``: ``bench.route_speed`` on that config, the gemma route against the Keras route →
  ``DIR/speed/route_speed.json``;
- ``tui``: ``bench.tui_screens`` with that config (Configure with backend keras, launch, live
  loss, Compare, Runs, export) → ``DIR/keras-tui/NN-name.svg`` and ``.txt`` (the screen's
  text), packed as ``DIR/keras-tui-screens.tgz``.

``DIR/keras.json``: each part's exit status, seconds and what it found.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
import time
from html import unescape
from pathlib import Path
from typing import Any

from bench.outdir import default_out

SEED = "examples/seed-003-imdb.toml"
PROMPTS = "examples/seed-003/prompts.txt"


def write_reviews(folder: Path) -> tuple[Path, Path]:
    """The IMDB-shaped reviews as JSONL: train (400) and the first 24 of test, as the seed reads
    ``tfds:imdb_reviews@train`` / ``@test[:24]`` from ``imdb_like.build``'s dataset."""
    spec = importlib.util.spec_from_file_location("imdb_like", Path("examples/seed-003/imdb_like.py"))
    imdb_like = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(imdb_like)
    folder.mkdir(parents=True, exist_ok=True)
    train, test = folder / "imdb-train.jsonl", folder / "imdb-test.jsonl"
    for path, rows in ((train, imdb_like.reviews(400, 0)), (test, imdb_like.reviews(100, 1)[:24])):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return train, test


def seed_sets(train: Path, test: Path) -> list[str]:
    """The ``--set`` items of the IMDB example's run on the Keras route over the JSONL reviews."""
    return ['model.backend="keras"', f'data.path="{train}"', f'data.eval_path="{test}"']


def svg_text(svg: str) -> str:
    """The text of a Textual screenshot: its ``<text>`` spans joined line by line (by y)."""
    lines: dict[float, list[tuple[float, str]]] = {}
    for x, y, body in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg, re.S):
        lines.setdefault(float(y), []).append((float(x), unescape(re.sub(r"<[^>]+>", "", body))))
    return "\n".join("".join(t for _, t in sorted(spans)).rstrip() for _, spans in sorted(lines.items()))


class Transcript:
    """Each command, its seconds, exit status and output, into one log file."""

    def __init__(self, path: Path):
        self.path = path
        path.write_text("")

    def run(self, title: str, cmd: list[str], timeout: float = 1800) -> tuple[int, str, float]:
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, text = p.returncode, p.stdout + p.stderr
            stdout = p.stdout
        except subprocess.TimeoutExpired as e:
            rc, text, stdout = 124, f"timed out after {timeout:.0f} s\n{e.stdout or ''}{e.stderr or ''}", ""
        seconds = time.monotonic() - t0
        with self.path.open("a", encoding="utf-8") as f:
            f.write(f"### {title}: {' '.join(cmd)}\n{text}### -> exit {rc} in {seconds:.1f} s\n")
        print(f"[keras] {title}: exit {rc} in {seconds:.1f} s", file=sys.stderr, flush=True)
        return rc, stdout, seconds


def part_plan(out: Path, py: str, **_: Any) -> dict[str, Any]:
    t = Transcript(out / "keras-plan.log")
    rc, _, s = t.run("plan", [py, "-m", "bench.keras_plan", "--set", "train.batch_size=8",
                              "--out", str(out / "keras-plan-v5e-8.md")])
    return {"rc": rc, "seconds": round(s, 1)}


def part_flow(out: Path, py: str, wb: str, sets: list[str], **_: Any) -> dict[str, Any]:
    t = Transcript(out / "keras-flow.log")
    flags = [x for s in sets for x in ("--set", s)]
    found: dict[str, Any] = {"steps": {}}
    rc, stdout, s = t.run("train", [wb, "train", SEED, *flags, "--json", "-q"])
    found["steps"]["train"] = {"rc": rc, "seconds": round(s, 1)}
    try:
        summary = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        summary = {}
    run = summary.get("id") or summary.get("run_id")
    found.update({k: summary.get(k) for k in ("id", "state", "step", "exact_match_base", "exact_match_tuned")})
    if run:
        for title, cmd in (("compare", [wb, "compare", "--run", run, "--prompts", PROMPTS]),
                           ("export", [wb, "export", run, "--format", "adapter", "--out",
                                       str(out / "keras-adapter"), "--force"])):
            rc2, _, s2 = t.run(title, cmd)
            found["steps"][title] = {"rc": rc2, "seconds": round(s2, 1)}
        found["adapter_files"] = sorted(p.name for p in (out / "keras-adapter").glob("*"))
    t.run("engine stop", [wb, "engine", "stop"])  # it holds the chip
    found["rc"] = max([st["rc"] for st in found["steps"].values()] + [0 if run else 1])
    return found


def part_speed(out: Path, py: str, sets: list[str], speed_steps: int, **_: Any) -> dict[str, Any]:
    t = Transcript(out / "keras-speed.log")
    flags = [x for s in sets for x in ("--set", s)]
    rc, _, s = t.run("route speed", [py, "-m", "bench.route_speed", "--config", SEED, *flags,
                                     "--steps", str(speed_steps), "--skip", "5", "--out", str(out / "speed")])
    result = out / "speed" / "route_speed.json"
    return {"rc": rc, "seconds": round(s, 1),
            **(json.loads(result.read_text()) if rc == 0 and result.is_file() else {})}


def part_tui(out: Path, py: str, sets: list[str], **_: Any) -> dict[str, Any]:
    t = Transcript(out / "keras-tui-run.log")
    folder = out / "keras-tui"
    flags = [x for s in sets for x in ("--set", s)]
    prompt = Path(PROMPTS).read_text(encoding="utf-8").splitlines()[0]
    rc, _, s = t.run("tui", [py, "-m", "bench.tui_screens", "--out", str(folder), "--config", SEED,
                             *flags, "--steps", "40", "--prompt", prompt])
    for svg in sorted(folder.glob("*.svg")):
        svg.with_suffix(".txt").write_text(svg_text(svg.read_text(encoding="utf-8")) + "\n", encoding="utf-8")
    with tarfile.open(out / "keras-tui-screens.tgz", "w:gz") as tar:
        tar.add(folder, arcname="keras-tui")
    log = folder / "tui.log"
    return {"rc": rc, "seconds": round(s, 1), "screens": sorted(p.name for p in folder.glob("*.svg")),
            "log": log.read_text(encoding="utf-8").splitlines() if log.is_file() else []}


def starter_missing() -> str | None:
    """Why the real 270M cannot train here (the bundle built without it), or None."""
    from adapters_lib.models import starter

    if starter.installed() or starter.target_path().is_file():
        return None
    return ("the real Gemma 3 270M is not installed here; build the bundle with "
            "`scripts/tpu_device.sh build .tpu --with-270m`")


RUNNERS = {"plan": part_plan, "flow": part_flow, "speed": part_speed, "tui": part_tui}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.keras_chip", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=default_out("keras_chip"))
    p.add_argument("--wb", default="gemma-workbench", help="the gemma-workbench command")
    p.add_argument("--parts", default=",".join(RUNNERS))
    p.add_argument("--speed-steps", type=int, default=60)
    a = p.parse_args(argv)
    parts = [x for x in a.parts.split(",") if x]
    unknown = [x for x in parts if x not in RUNNERS]
    if unknown:
        print(f"error: unknown part {', '.join(unknown)}; the parts are {', '.join(RUNNERS)}", file=sys.stderr)
        return 2
    missing = starter_missing() if set(parts) - {"plan"} else None
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    train, test = write_reviews(out / "data")
    kw = dict(py=sys.executable, wb=a.wb, sets=seed_sets(train, test), speed_steps=a.speed_steps)
    report: dict[str, Any] = {}
    for name in parts:
        t0 = time.monotonic()
        try:
            report[name] = RUNNERS[name](out, **kw)
        except Exception as e:  # noqa: BLE001 - one part's failure leaves the others to run
            report[name] = {"rc": 1, "error": f"{type(e).__name__}: {e}"}
        report[name]["part_seconds"] = round(time.monotonic() - t0, 1)
        (out / "keras.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: {"rc": v.get("rc"), "s": v["part_seconds"]} for k, v in report.items()}))
    return 0 if all(v.get("rc") == 0 for v in report.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
