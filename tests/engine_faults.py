"""A real engine process with faults injected from outside the library (for the fault tests).

``python tests/engine_faults.py [engine args]`` runs ``adapters_lib.engine.daemon.main`` after
installing what these environment variables ask for:

- ``WB_FAULT_SLOW_FINALIZE_S=S`` with ``WB_FAULT_SLOW_FROM_STEP=K``: orbax's atomic rename of a
  checkpoint (its commit) waits S seconds first, for steps >= K, so that a test can kill the
  engine while ``checkpoints/<K>.orbax-checkpoint-tmp`` is written but not committed (it
  touches ``$GEMMA_WORKBENCH_HOME/commit-pending-<K>`` then);
- ``WB_FAULT_FSIZE=1``: a watcher thread imposes ``RLIMIT_FSIZE`` (a real ``EFBIG`` from the
  kernel; ``SIGXFSZ`` ignored) on this process at a chosen moment of named runs, and lifts it
  when that run has failed, so that the engine goes on:
  - a run named ``fail-checkpoint``: 16 KiB once its checkpoint ``WB_FAULT_CKPT_AT`` is
    complete (status, events and metrics stay smaller; every checkpoint file is larger);
  - a run named ``fail-metrics``: the current size of its metrics.jsonl once it holds
    ``WB_FAULT_METRICS_AT`` lines (the next metrics line cannot be appended).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path


def slow_finalize(seconds: float, from_step: int) -> None:
    from orbax.checkpoint._src.path import atomicity

    original = atomicity.AtomicRenameTemporaryPath.finalize

    async def finalize(self, *args, **kwargs):
        name = Path(str(self.get_final())).name
        if name.isdigit() and int(name) >= from_step:
            (Path(os.environ["GEMMA_WORKBENCH_HOME"]) / f"commit-pending-{name}").touch()  # tell the test
            await asyncio.sleep(seconds)
        return await original(self, *args, **kwargs)

    atomicity.AtomicRenameTemporaryPath.finalize = finalize


def _runs_dir() -> Path:
    return Path(os.environ["GEMMA_WORKBENCH_HOME"]) / "data" / "runs"


def _watch_fsize(ckpt_at: int, metrics_at: int) -> None:
    """Never prints once a limit is on (stderr is a file past the limit: the print would fail)."""
    from adapters_lib import runs

    unlimited = resource.getrlimit(resource.RLIMIT_FSIZE)
    done: set[str] = set()
    limited: str | None = None
    while True:
        time.sleep(0.01)
        try:
            # the folder's names first (100 times a second for the engine's whole life: the
            # other runs' files are never read), then the named runs' own files
            for run_id in os.listdir(_runs_dir()):
                name = run_id.split("-", 2)[-1]
                if name not in ("fail-checkpoint", "fail-metrics") or run_id in done:
                    continue
                run = runs.RunDir(_runs_dir() / run_id)
                if not (run.path / "config.toml").is_file():  # being created
                    continue
                if limited == run.run_id:
                    if run.state not in ("queued", "running", "stopping"):
                        resource.setrlimit(resource.RLIMIT_FSIZE, unlimited)
                        done.add(run.run_id)
                        limited = None
                    continue
                if limited is not None or run.state != "running":
                    continue
                if name == "fail-checkpoint" and ckpt_at in run.checkpoints():
                    limit = 16 * 1024
                elif name == "fail-metrics" and len(run.metrics()) >= metrics_at:
                    limit = run.metrics_path.stat().st_size
                else:
                    continue
                (Path(os.environ["GEMMA_WORKBENCH_HOME"]) / f"fsize-{name}").write_text(
                    json.dumps({"limit": limit, "checkpoints": run.checkpoints()}))
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, unlimited[1]))
                limited = run.run_id
        except OSError:  # a run folder changing under the listing: look again
            continue


def main() -> int:
    if os.environ.get("WB_FAULT_SLOW_FINALIZE_S"):
        slow_finalize(float(os.environ["WB_FAULT_SLOW_FINALIZE_S"]),
                      int(os.environ.get("WB_FAULT_SLOW_FROM_STEP", "0")))
    if os.environ.get("WB_FAULT_FSIZE"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        args = (int(os.environ.get("WB_FAULT_CKPT_AT", "4")), int(os.environ.get("WB_FAULT_METRICS_AT", "20")))
        threading.Thread(target=_watch_fsize, args=args, daemon=True, name="fault-fsize").start()
    from adapters_lib.engine.daemon import main as engine_main

    return engine_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
