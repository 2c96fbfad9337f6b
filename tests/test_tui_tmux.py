"""End to end in a real terminal (tmux): launch a demo run from the TUI, quit, reopen, and the
run is still there — going or done — with its plot.

Drives ``.venv/bin/gemma-workbench`` exactly as a user (or a script) would: keys in, screen
text out (``tmux capture-pane -p``). The TUI starts its own engine (detached) in a private
GEMMA_WORKBENCH_HOME; the test stops that engine at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).parent / "gemma-workbench"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or not EXE.exists(),
                                reason="needs tmux and the gemma-workbench entry point")

TINY = """
[data]
max_length = 64
[lora]
rank = 4
[mesh]
devices = 1
[train]
steps = 300
batch_size = 4
eval_every = 1000
eval_exact_match = 0
checkpoint_every = 10
warmup_steps = 2
"""


class Terminal:
    def __init__(self, home: Path):
        self.socket = f"wb-test-{os.getpid()}"
        self.session = 0
        self.env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        self.env.update(GEMMA_WORKBENCH_HOME=str(home), JAX_PLATFORMS="cpu", TERM="xterm-256color")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              env=self.env, timeout=30).stdout

    @property
    def target(self) -> str:
        return f"wb{self.session}"

    def start(self) -> None:
        """Open the TUI in a new 80×24 terminal (a new tmux session)."""
        self.session += 1
        self.tmux("new-session", "-d", "-s", self.target, "-x", "80", "-y", "24",
                  f"{EXE}; echo TUI-EXITED; sleep 600")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.target)

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", self.target, key)
            time.sleep(0.15)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", text)

    def wait_for(self, *needles: str, timeout: float = 180.0) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            text = self.screen()
            if all(n in text for n in needles):
                return text
            time.sleep(0.25)
        raise AssertionError(f"never saw {needles!r}; the screen:\n{self.screen()}")

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def terminal(tmp_path: Path):
    term = Terminal(tmp_path / "home")
    yield term
    term.close()
    # the run may still be training: --force checkpoints it and stops the engine
    subprocess.run([str(EXE), "engine", "stop", "--force"], env=term.env, capture_output=True,
                   timeout=120)


def test_a_run_launched_in_the_tui_survives_quitting_and_is_found_again(terminal, tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY, encoding="utf-8")
    terminal.start()
    terminal.wait_for("1 Models", "demo")
    terminal.keys("2")
    terminal.wait_for("config valid", "devices")
    terminal.keys("C-o")
    terminal.wait_for("Open a run config")
    terminal.type(str(config))
    terminal.keys("Enter")
    terminal.wait_for("config valid", "1 cpu devices")
    terminal.keys("C-l")
    running = terminal.wait_for("running", "┤", "loss")  # the Train screen drew a plot
    run_line = next(line for line in running.splitlines() if "running" in line)
    run_name = run_line.split()[0]

    terminal.keys("q")
    terminal.wait_for("TUI-EXITED")
    terminal.tmux("kill-session", "-t", terminal.target)

    terminal.start()
    terminal.wait_for("1 Models")
    terminal.keys("3")
    again = terminal.wait_for(run_name, "┤", timeout=60)
    assert "running" in again or "completed" in again, again
    assert "waiting for data" not in again.split("grad norm")[0]  # the loss plot is drawn
