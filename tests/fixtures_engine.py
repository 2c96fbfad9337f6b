"""Fixtures for tests that talk to a real engine process.

- ``engine_process``: one engine subprocess per test module, in its own GEMMA_WORKBENCH_HOME
  (data, state, runtime dirs), started the way the client starts it (own session); stopped
  (or killed) at the end of the module. ``.client`` is an ``EngineClient`` bound to it.
- ``engine``: that client (what most tests want).
- ``engine_factory``: make more engines (``factory(home=..., args=[...])``), e.g. to restart
  one in the same home after ``kill -9``; ``command=[...]`` runs another entry point instead of
  ``python -m adapters_lib.engine`` (the fault tests' ``tests/engine_faults.py``).
- ``demo_run_config(**train)``: a small, fast demo run config (max_length 64, 1 device).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.client import EngineClient


def demo_run_config(**train: Any) -> dict[str, Any]:
    """A demo LoRA run that trains fast on CPU: 1 device, max_length 64, no exact-match.

    The schedule is ``constant`` (after 2 warm-up steps). The schedule's numbers (learning
    rate, warm-up, length) are inputs of the compiled train step, so runs of any length share
    one program, in one engine and (through the session's compile cache) across engines; the
    schedule's kind is part of the program. Pass ``schedule="cosine"`` where the schedule is part
    of what a test checks."""
    t = {"steps": 30, "batch_size": 4, "log_every": 1, "checkpoint_every": 5,
         "eval_every": 1000, "eval_batches": 1, "eval_exact_match": 0, "warmup_steps": 2,
         "schedule": "constant"}
    t.update(train)
    return {"data": {"max_length": 64}, "lora": {"rank": 4}, "mesh": {"devices": 1}, "train": t}


class EngineProcess:
    """An engine subprocess in ``home``; ``start()`` waits until it answers."""

    def __init__(self, home: Path, args: list[str] | tuple[str, ...] = (),
                 env: dict[str, str] | None = None, command: list[str] | None = None):
        self.home = Path(home)
        self.args = list(args)
        self.command = list(command or [sys.executable, "-m", "adapters_lib.engine"])
        self.env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(self.home), **(env or {})}
        self.env.pop("GEMMA_WORKBENCH_RUNS", None)
        self.proc: subprocess.Popen | None = None
        self.client: EngineClient | None = None
        self.start_seconds: float | None = None

    @property
    def runtime(self) -> Path:
        return self.home / "run"

    @property
    def log_path(self) -> Path:
        return self.home / "state" / "engine.log"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = 120.0) -> EngineClient:
        self.home.mkdir(parents=True, exist_ok=True)
        out = open(self.home / "engine-stdio.log", "ab")  # noqa: SIM115 - lives with the process
        t0 = time.monotonic()
        self.proc = subprocess.Popen([*self.command, *self.args],
                                     env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=out, start_new_session=True)
        out.close()
        self.client = EngineClient(socket_path=self.runtime / "engine.sock",
                                   token_path=self.runtime / "engine.token")
        try:
            self.client.wait_ready(timeout, self.proc)
        except Exception:
            self.kill()
            raise AssertionError(f"engine did not start:\n{self.log_text()[-3000:]}") from None
        self.start_seconds = time.monotonic() - t0
        return self.client

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``: no clean-up at all, as when the machine runs out of memory."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        if self.client is not None:
            self.client.close()

    def stop(self, timeout: float = 60.0) -> None:
        if not self.alive():
            return
        try:
            assert self.client is not None
            self.client.shutdown()
            self.proc.wait(timeout)
        except Exception:  # noqa: BLE001 - fall back to the hard way
            self.kill()
        if self.client is not None:
            self.client.close()


@pytest.fixture(scope="module")
def engine_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    made: list[EngineProcess] = []

    def factory(home: Path | None = None, args: list[str] | tuple[str, ...] = (),
                env: dict[str, str] | None = None, start: bool = True,
                command: list[str] | None = None) -> EngineProcess:
        proc = EngineProcess(home or tmp_path_factory.mktemp("engine-home"), args, env, command)
        made.append(proc)
        if start:
            proc.start()
        return proc

    yield factory
    for proc in made:
        proc.stop()


@pytest.fixture(scope="module")
def engine_process(engine_factory: Any) -> EngineProcess:
    return engine_factory()


@pytest.fixture(scope="module")
def engine(engine_process: EngineProcess) -> EngineClient:
    assert engine_process.client is not None
    return engine_process.client
