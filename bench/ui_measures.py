"""The UI measures: the TUI's first frame under tmux and the cost of a live stream on training.

Registered in ``bench.measures.MEASURES`` like the others (``python -m bench --only ui_start``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.measures import _row, measure
from bench.report import Row


def _tmux_first_frame(home: str, marker: str = "Models", timeout: float = 20.0) -> float:
    import shutil
    import subprocess

    if not shutil.which("tmux"):
        raise RuntimeError("tmux not found")
    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    sock = f"wb-bench-{os.getpid()}-{time.monotonic_ns()}"  # a fresh server each time
    env_cmd = f"env GEMMA_WORKBENCH_HOME={home} {exe}"
    t0 = time.perf_counter()
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "80", "-y", "24", env_cmd], check=True,
                   capture_output=True)
    try:
        while time.perf_counter() - t0 < timeout:
            screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p"], capture_output=True,
                                    text=True).stdout
            if marker in screen:
                return time.perf_counter() - t0
            time.sleep(0.01)
        raise RuntimeError("no first frame")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


@measure("ui_start")
def ui_start(quick: bool = False) -> list[Row]:
    """TUI cold start to first frame (tmux, 80×24); engine start to ready."""
    import statistics
    import subprocess
    import tempfile

    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    rows = []
    with tempfile.TemporaryDirectory() as home:
        _tmux_first_frame(home)  # warm the page cache
        times = [_tmux_first_frame(home) for _ in range(5)]
        rows.append(Row(measure="TUI cold start to first frame", ours=statistics.median(times), unit="s",
                        target="≤ 1.0 s", met=statistics.median(times) <= 1.0,
                        note="tmux 80×24, process start to 'Models' on screen, median of 5"))
        env = {**os.environ, "GEMMA_WORKBENCH_HOME": home}
        starts = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([exe, "engine", "start"], env=env, check=True, capture_output=True, timeout=120)
            starts.append(time.perf_counter() - t0)
            subprocess.run([exe, "engine", "stop", "--force"], env=env, capture_output=True, timeout=120)
        rows.append(Row(measure="engine start to ready", ours=statistics.median(starts), unit="s",
                        note="`gemma-workbench engine start` until it answers, median of 3 (reported)"))
    return rows


@measure("ui_overhead")
def ui_overhead(quick: bool = False) -> list[Row]:
    """Training tokens/s with a client following the run's live stream vs no client."""
    import statistics
    import subprocess
    import tempfile
    import threading

    steps = 40 if quick else 80
    exe = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gemma-workbench")
    overrides = [f"train.steps={steps}", "train.eval_every=1000", "train.checkpoint_every=1000",
                 "train.eval_exact_match=0", "mesh.devices=1", "mesh.data=1", "mesh.fsdp=1",
                 "mesh.tensor=1", "data.max_length=128", "train.batch_size=8"]
    with tempfile.TemporaryDirectory() as home:
        old = os.environ.get("GEMMA_WORKBENCH_HOME")
        os.environ["GEMMA_WORKBENCH_HOME"] = home
        try:
            from workbench.client import EngineClient

            client = EngineClient.connect()

            def one(follow: bool) -> float:
                run = client.create_run(config_toml="", overrides=overrides, source="bench")
                stop = threading.Event()
                seen = [0]

                def follower():
                    with EngineClient.connect() as c:
                        for item in c.stream_run(run.id):
                            seen[0] += 1
                            if stop.is_set() or item.type == "end":
                                return

                th = threading.Thread(target=follower, daemon=True) if follow else None
                if th:
                    th.start()
                client.wait_run(run.id, timeout=900)
                stop.set()
                metrics = client.get_run(run.id).metrics
                rates = [m["tokens_per_s"] for m in metrics if m.get("step", 0) > 5 and m.get("tokens_per_s")]
                return statistics.median(rates)

            one(False)  # warm-up: compiles (the engine keeps the compile cache)
            pairs = [(one(True), one(False)) for _ in range(2 if quick else 3)]
        finally:
            subprocess.run([exe, "engine", "stop", "--force"], capture_output=True, timeout=120)
            if old is None:
                os.environ.pop("GEMMA_WORKBENCH_HOME", None)
            else:
                os.environ["GEMMA_WORKBENCH_HOME"] = old
    attached = statistics.median(p[0] for p in pairs)
    alone = statistics.median(p[1] for p in pairs)
    return [_row("train tokens/s, live stream attached vs none", attached, alone, unit="tok/s",
                 target="≥ 0.97×", ref_name="no client",
                 note=f"engine process, demo, {steps} steps × {len(pairs)} pairs; a client follows the SSE stream")]
