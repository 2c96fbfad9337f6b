"""The multi-host engine end to end: ``gemma-workbench engine start --multihost`` as 2
processes × 1 CPU device (jax.distributed, gloo) on localhost.

Process 0 serves the API on its Unix socket; a detached run created through the real
``EngineClient`` trains on a mesh that spans both processes (``fsdp = 2``: every step
all-gathers the weights across them), so it completes only if process 1 runs each step too.
Sampling (the base model or the run's checkpoint) runs on process 0 alone; exporting a run's
checkpoint runs on every process (its restores wait on all of them), process 0 writing it.
``POST /v1/shutdown`` on process 0 stops both.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from xla_flags import FAST_XLA

from workbench.client import EngineClient

REPO = Path(__file__).resolve().parent.parent
STEPS = 4
RUN_CONFIG = {
    "model": {"source": "demo"},
    "data": {"path": "demo", "max_length": 32},
    "lora": {"rank": 4},
    "mesh": {"devices": 0, "data": 1, "fsdp": 2, "tensor": 1},
    "train": {"steps": STEPS, "batch_size": 2, "log_every": 1, "checkpoint_every": 2,
              "eval_every": 1000, "eval_batches": 1, "eval_exact_match": 0, "warmup_steps": 1},
    "run": {"name": "multihost-engine"},
}
STEP_LINE = re.compile(rf"step (\d+)/{STEPS} loss (\d+\.\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A home with a short path: the socket path must stay under ~100 bytes."""
    home = Path(tempfile.mkdtemp(prefix="wb-mh-"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def _start(home: Path, port: int, i: int) -> subprocess.Popen:
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(home), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1 " + FAST_XLA,
           "GEMMA_WORKBENCH_MULTIHOST_TIMEOUT": "20"}
    env.pop("GEMMA_WORKBENCH_RUNS", None)
    out = open(home / f"stdio-{i}.log", "ab")  # noqa: SIM115 - closed below, the child keeps it
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "workbench", "engine", "start", "--multihost",
             "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    finally:
        out.close()


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole session (it was started in its own), then reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _logs(home: Path) -> str:
    parts = []
    for p in sorted((home / "state").glob("engine*.log")) + sorted(home.glob("stdio-*.log")):
        parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}")
    return "\n".join(parts)


@pytest.mark.slow
def test_multihost_engine_trains_a_detached_run_on_both_processes(short_home):
    home = short_home
    port = _free_port()
    procs: list[subprocess.Popen] = []
    client = EngineClient(socket_path=home / "run" / "engine.sock",
                          token_path=home / "run" / "engine.token")
    try:
        for i in range(2):
            procs.append(_start(home, port, i))
        client.wait_ready(120, procs[0])
        status = client.status(wait=True)
        assert status.jax.ready, status.jax
        assert sorted(d.process_index for d in status.devices) == [0, 1]

        created = client.create_run(RUN_CONFIG, source="test_multihost_leader")
        done = client.wait_run(created.id, timeout=180)
        run = client.get_run(created.id)
        assert done.state == "completed", (run.message, _logs(home))
        assert run.step == STEPS and run.processes == 2
        assert run.pid == procs[0].pid  # process 0 trained and wrote it

        # The run directory (written by process 0 alone) has its files.
        run_dir = Path(run.dir)
        assert run_dir.is_relative_to(home)
        for name in ("config.toml", "status.json", "metrics.jsonl", "events.jsonl", "train.log"):
            assert (run_dir / name).is_file(), name
        leader_losses = {int(m["step"]): float(m["loss"]) for m in run.metrics}
        assert sorted(leader_losses) == list(range(1, STEPS + 1))
        # orbax's multi-host save needs every process: a complete checkpoint proves both wrote
        assert run.checkpoints == [2, STEPS]
        assert [e["step"] for e in run.events if e["kind"] == "checkpoint"] == [2, STEPS]

        # Process 1 ran the same steps with the same losses (it logs them; writes no files).
        follower_log = (home / "state" / "engine-process-1.log").read_text(errors="replace")
        assert "multi-host follower 1 of 2" in follower_log
        follower_losses = {int(k): float(v) for k, v in STEP_LINE.findall(follower_log)}
        assert sorted(follower_losses) == list(range(1, STEPS + 1)), follower_log[-3000:]
        for k, loss in follower_losses.items():
            assert abs(loss - leader_losses[k]) <= 1e-4 + 1e-4 * abs(loss), (k, loss, leader_losses)

        # Process-local work still runs on process 0's own device: sampling the base model.
        items = list(client.sample("1 + 2 =", model="demo", max_new_tokens=4))
        assert items[-1].type == "done" and items[-1].data.complete is True, items[-3:]
        # ... and the run's checkpoint: process 0 restores its adapters alone (a process-local
        # orbax restore, no barrier over the busy follower) and samples with them.
        items = list(client.sample("1 + 2 =", run_id=created.id, max_new_tokens=4))
        assert items[-1].type == "done" and items[-1].data.complete is True, items[-3:]
        # Export runs on every process (OnEveryProcess): process 0 writes it, the engine stays
        # responsive, and the follower ran the same export into a folder of its own.
        out = home / "exported"
        reply = client.export(created.id, format="adapter", out=str(out))
        assert reply.out == str(out) and reply.format == "adapter"
        assert (out / "adapter_config.json").is_file(), sorted(p.name for p in out.iterdir())
        assert client.status().busy is False

        # Stopping process 0 stops process 1 (the ``shutdown`` message), both cleanly.
        assert client.shutdown().stopping is True
        codes = [p.wait(60) for p in procs]
        assert codes == [0, 0], _logs(home)
        follower_log = (home / "state" / "engine-process-1.log").read_text(errors="replace")
        assert "process 0 asked to stop" in follower_log
        assert not (home / "run" / "engine.sock").exists()
        # The follower ran the same export on its own devices (an adapter export needs no
        # collective): it restores onto its own first device, never onto process 0's.
        done_line = f"export of run {created.id} done here"
        assert done_line in follower_log and "failed here" not in follower_log, follower_log[-3000:]
    finally:
        client.close()
        for p in procs:
            _kill(p)
