"""``gemma-workbench runs delete``: shows what it deletes, asks on a terminal, ``--yes`` for scripts.

One real engine (``--no-warm``: these commands need no JAX) in its own home; runs are made on
disk in its runs folder, as a foreground ``train`` makes them.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters_lib import runs
from adapters_lib.config import load_config
from workbench.cli import main


@pytest.fixture(scope="module")
def home(engine_factory) -> Path:
    return engine_factory(args=["--no-warm"]).home


@pytest.fixture
def cli_home(home, monkeypatch) -> Path:
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(home))
    return home


def _make_run(home: Path, name: str) -> runs.RunDir:
    run = runs.create_run(load_config(None, [f"run.name={name}"]), root=home / "data" / "runs")
    step = run.checkpoints_dir / "5"  # a complete checkpoint by the one rule: params + meta
    (step / "params").mkdir(parents=True)
    (step / "params" / "data").write_bytes(b"\0" * 3000)
    (step / "meta").mkdir()
    (step / "meta" / "metadata").write_text('{"step": 5, "loss": 2.5, "finite": true}')
    run.set_state("running")  # a run completes by running: the lifecycle has no shortcut
    run.set_state("completed")
    return run


def test_delete_without_a_terminal_or_yes_refuses_in_one_line_and_keeps_the_run(cli_home, capsys):
    run = _make_run(cli_home, "keepme")
    code = main(["runs", "delete", run.run_id])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: runs delete: not deleting run")
    assert "--yes" in err
    assert run.path.is_dir()


def test_delete_yes_shows_id_state_and_size_then_deletes_by_the_exact_id(cli_home, capsys):
    run = _make_run(cli_home, "gone")
    other = _make_run(cli_home, "other")  # made in the same second: shares the time stamp
    prefix = run.run_id[:-2]  # a unique prefix of run, not of other
    assert not other.run_id.startswith(prefix)
    assert main(["runs", "delete", prefix, "--yes"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"run {run.run_id} deleted"
    assert run.run_id in err and "completed" in err and "1 checkpoint" in err
    assert " kB in " in err  # the size, measured on disk
    assert not run.path.exists() and other.path.is_dir()


def test_delete_of_an_unknown_run_is_one_line(cli_home, capsys):
    code = main(["runs", "delete", "no-such-run-anywhere", "--yes"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no-such-run-anywhere" in err
    assert "Traceback" not in err


def _ask_on_a_pty(home: Path, run_id: str, answer: bytes) -> tuple[int, str]:
    """Run the real CLI with a terminal on stdin/stderr; type ``answer`` at the question."""
    leader, follower = pty.openpty()
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "runs", "delete", run_id],
                            stdin=follower, stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while b"[y/N]" not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                seen += os.read(leader, 4096)
        assert b"[y/N]" in seen, seen.decode(errors="replace")
        os.write(leader, answer + b"\n")
        code = proc.wait(120)
        while True:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    return code, seen.decode(errors="replace")


def test_delete_asks_on_a_terminal_and_only_yes_deletes(home):
    run = _make_run(home, "asked")
    code, text = _ask_on_a_pty(home, run.run_id, b"n")
    assert code == 1 and "not deleted" in text
    assert run.run_id in text and "completed" in text and str(run.path) in text
    assert run.path.is_dir()
    code, text = _ask_on_a_pty(home, run.run_id, b"y")
    assert code == 0 and not run.path.exists()
