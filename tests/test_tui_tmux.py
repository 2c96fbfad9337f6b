"""The README's flow in a real terminal (tmux, 80×24), typed literally as docs/tui.md says:
launch, see the catalog, configure 30 steps and launch, quit mid-run, reopen, reattach with
``3``, then ``4``, a prompt with digits and ``?``, ``enter``: both panes fill.

Drives ``.venv/bin/gemma-workbench`` exactly as a user (or a script) would: keys in, screen
text out (``tmux capture-pane -p``). The TUI starts its own engine (detached, cold) in a
private GEMMA_WORKBENCH_HOME; the test stops that engine at the end. It prints the time from
launch to the first frame and to the listed catalog (measured, never asserted).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from xla_flags import FAST_XLA

REPO = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).parent / "gemma-workbench"
PROMPT = "Is 17 even or odd?"
KEY_GAP = 0.3
"""Seconds between two keys, as a script types. Not shorter: at 0.15 s, on a loaded machine
(load ~9 on 2 cores), ``tab tab tab ctrl+u 30 enter ctrl+l`` once left *steps* empty,
marked "yours" ("train.steps is empty", no run): the keys outran the app, and the
"config valid" wait after ``enter`` can match the screen from before them."""

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None or not EXE.exists(),
                       reason="needs tmux and the gemma-workbench entry point"),
    pytest.mark.slow,  # ~2–4 min: a cold engine, a 30-step demo run and a compare
]


class Terminal:
    def __init__(self, home: Path):
        self.socket = f"wb-test-{os.getpid()}"
        self.session = 0
        # one CPU device, as a user's machine has (not the suite's 8); the suite's quick LLVM
        # back end, as every engine the suite starts (the same programs, compiled with less work)
        self.env = {**os.environ, "XLA_FLAGS": FAST_XLA}
        self.env.update(GEMMA_WORKBENCH_HOME=str(home), JAX_PLATFORMS="cpu", TERM="xterm-256color")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              env=self.env, timeout=30)

    def tmux(self, *args: str) -> str:
        return self.run(*args).stdout

    @property
    def target(self) -> str:
        return f"wb{self.session}"

    def start(self) -> float:
        """Open the TUI in a new 80×24 terminal (a new tmux session); returns the start time.

        A tmux server whose last session just ended (or that was just killed) exits: a new
        session asked of it meanwhile fails ("server exited unexpectedly", more often under
        load) and the pane the test then watches does not exist. The session is asked for
        again until tmux has it."""
        self.session += 1
        deadline = time.monotonic() + 30
        while True:
            t0 = time.monotonic()
            made = self.run("new-session", "-d", "-s", self.target, "-x", "80", "-y", "24",
                            f"{EXE}; echo TUI-EXITED; sleep 600")
            if made.returncode == 0 and self.run("has-session", "-t", self.target).returncode == 0:
                return t0
            if time.monotonic() > deadline:
                raise AssertionError(f"tmux made no session {self.target}: {made.stderr.strip()}")
            time.sleep(0.2)

    def screen(self) -> str:
        shown = self.run("capture-pane", "-p", "-t", self.target)
        if shown.returncode != 0:  # no pane to watch: say so now, not after the wait's timeout
            raise AssertionError(f"tmux has no pane {self.target}: {shown.stderr.strip()}")
        return shown.stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", self.target, key)
            time.sleep(KEY_GAP)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.target, "-l", text)
        time.sleep(KEY_GAP)

    def wait_for(self, *needles: str, timeout: float = 240.0, absent: str = "") -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            text = self.screen()
            if all(n in text for n in needles) and not (absent and absent in text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"never saw {needles!r}; the screen:\n{self.screen()}")

    def close(self) -> None:
        self.tmux("kill-server")


def pane_texts(screen: str) -> tuple[str, str]:
    """The text inside the base and tuned panes of the Compare screen (80 columns)."""
    lines = screen.splitlines()
    top = next(i for i, line in enumerate(lines) if "base" in line and "╭" in line)
    left, right = [], []
    for line in lines[top + 1:]:
        if "╰" in line:
            break
        left.append(line[1:39].strip())
        right.append(line[41:79].strip())
    return " ".join(t for t in left if t), " ".join(t for t in right if t)


def stop_engine(home: Path, timeout: float = 180.0) -> None:
    """What ``gemma-workbench engine stop --force`` does (``workbench.commands.engine``), from
    this process (no second Python started): ask the engine to shut down — a run still
    training checkpoints at its next step and stops — and wait until it no longer answers."""
    from workbench.client import EngineClient
    from workbench.commands.engine import _pid_gone

    run = home / "run"
    if not (run / "engine.sock").exists():
        return
    with EngineClient(socket_path=run / "engine.sock", token_path=run / "engine.token") as client:
        if not client.ping():
            return
        pid = client.status().pid
        client.shutdown()
        t0 = time.monotonic()
        while client.ping() and time.monotonic() - t0 < timeout:
            time.sleep(0.1)
    _pid_gone(pid, max(1.0, timeout - (time.monotonic() - t0)))  # and its process (a zombie counts)


@pytest.fixture
def terminal(tmp_path: Path):
    term = Terminal(tmp_path / "home")
    yield term
    term.close()
    stop_engine(tmp_path / "home")  # the run may still be training: it checkpoints and stops


def test_the_readme_flow_typed_literally(terminal):
    # 1. `gemma-workbench` — the Models screen lists `demo`
    t0 = terminal.start()
    terminal.wait_for("1 Models", timeout=60)
    first_frame = time.monotonic() - t0
    terminal.wait_for("1 Models", "demo ", "builtin", timeout=120)
    catalog = time.monotonic() - t0
    print(f"\ncold start: first frame {first_frame:.2f} s, catalog listed {catalog:.2f} s "
          f"({catalog - first_frame:.2f} s after the first frame)")

    # 2. `2` (the page tabs have the focus; escape, a habit, changes nothing); → → → (Train
    # page); tab tab tab (steps); ctrl+u, 30, enter
    terminal.keys("2")
    terminal.wait_for("config valid", "cpu device")
    terminal.keys("Escape", "Right", "Right", "Right", "Tab", "Tab", "Tab", "C-u")
    terminal.type("30")
    terminal.keys("Enter")
    terminal.wait_for("config valid")
    # 3. ctrl+l — the run is created and the Train screen follows it
    terminal.keys("C-l")
    running = terminal.wait_for("running", "/30", "┤", "loss")  # a plot is drawn
    run_name = next(line for line in running.splitlines() if "running" in line).split()[0]

    # 6. `q` mid-run; open again and press `3`: the Train screen reattaches
    terminal.keys("q")
    terminal.wait_for("TUI-EXITED")
    quit_session = terminal.target
    terminal.start()  # before the old session ends: the tmux server keeps running
    terminal.tmux("kill-session", "-t", quit_session)
    terminal.wait_for("1 Models")
    terminal.keys("3")
    again = terminal.wait_for(run_name, "┤", timeout=60)
    assert "running" in again or "completed" in again, again
    if "running" in again:  # 4. `s` — stop (it checkpoints first)
        terminal.keys("s")
    terminal.wait_for(run_name, "ckpts (", timeout=240, absent="running")

    # 4. `4` — Compare: the prompt has the focus; type a prompt with digits and `?`, enter
    terminal.keys("4")
    terminal.wait_for("same seed, same settings", "tuned ·")
    terminal.type(PROMPT)
    screen = terminal.wait_for(PROMPT)
    assert "4 Compare" in screen and "Help" in screen  # `?` did not open Help, `1` no screen
    terminal.keys("Enter")
    done = terminal.wait_for("✓ done", timeout=300)
    base, tuned = pane_texts(done)
    assert base and tuned and "…" not in (base, tuned), done
    assert "tokens" in done.split("╰")[1]  # each pane's frame says what its side made
    assert "4 Compare" in done and PROMPT in done  # still on Compare, the prompt kept
