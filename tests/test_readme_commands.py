"""The README's shell blocks, run as a newcomer types them, on one CPU device.

Every ```sh block of README.md is either run here line by line, dry-run, or named with the
reason it is not run; a block this file does not know fails the test, so a new one cannot
go unchecked.

- "The everyday commands, on the demo model": each line runs as written, in a scratch folder that holds
  ``.venv/bin/gemma-workbench`` (this interpreter's entry point) and ``examples/demo.toml``
  (the repository's file with ``steps``, ``eval_every`` and ``checkpoint_every`` lowered:
  the only change, so that the lines take seconds; the tuned model is not judged here).
  One engine of its own (its own home, one device: ``XLA_FLAGS`` without the suite's device
  count) serves them all; ``<run-id>`` is the id the ``--detach`` line printed, as the README
  says. The engine compiles with the suite's quick LLVM back end (``FAST_XLA``), as every
  other engine of the suite: the same programs, less optimized machine code, so its compiles
  cost less and can come from the session's compile cache.
- "The two commands": ``make -n run`` and ``make -n test`` (the targets exist and expand;
  running them would open the TUI and run this very suite).
- "Real weights": not run here. Each line is minutes of CPU on the real 270M (load, eval, 40
  LoRA steps); tests/test_real_270m.py runs the same path, tests/test_docs.py parses each line
  against the CLI.
- The command-line synopsis: forms, not commands; tests/test_docs.py checks it against the
  parser.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from xla_flags import FAST_XLA

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
STEPS = 4


def shell_blocks(text: str) -> dict[str, list[str]]:
    """The ```sh blocks under each ``## `` heading: heading → its command lines (comments
    and blank lines dropped, continuations joined)."""
    out: dict[str, list[str]] = {}
    heading, block = "", None
    for line in text.splitlines():
        if block is None and line.startswith("## "):
            heading = line[3:].strip()
        elif block is None and line.strip() == "```sh":
            block = []
        elif block is not None and line.strip() == "```":
            out.setdefault(heading, []).extend(block)
            block = None
        elif block is not None:
            if block and block[-1].endswith("\\"):
                block[-1] = block[-1][:-1] + " " + line.strip()
            elif line.strip() and not line.lstrip().startswith("#"):
                block.append(line.strip())
    return out


RUN = "The everyday commands, on the demo model"
MAKE = "The two commands"
NOT_RUN = {  # heading (start) → why its lines are not run here
    "Real weights": "minutes of CPU each on the real 270M; tests/test_real_270m.py runs the "
                    "same path, tests/test_docs.py parses every line",
    "Command line": "the synopsis (forms, not commands): tests/test_docs.py checks it",
}


def test_every_readme_shell_block_is_run_or_says_why_not():
    blocks = shell_blocks(README.read_text(encoding="utf-8"))
    unknown = [h for h in blocks if h not in (RUN, MAKE) and not h.startswith(tuple(NOT_RUN))]
    assert not unknown, f"README shell blocks this test neither runs nor skips with a reason: {unknown}"
    assert blocks.get(RUN) and blocks.get(MAKE), sorted(blocks)


def test_the_make_targets_of_the_two_commands_exist():
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    for line in shell_blocks(README.read_text(encoding="utf-8"))[MAKE]:
        words = line.split("#")[0].split()
        assert words[0] == "make", line
        done = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}: {done.stderr}"
        assert ".venv/bin/" in done.stdout, done.stdout


def _scratch(tmp: Path) -> Path:
    """A folder a newcomer's shell would be in: .venv/bin/gemma-workbench and examples/."""
    (tmp / ".venv" / "bin").mkdir(parents=True)
    (tmp / ".venv" / "bin" / "gemma-workbench").symlink_to(Path(sys.executable).parent / "gemma-workbench")
    (tmp / "examples").mkdir()
    text = (REPO / "examples" / "demo.toml").read_text(encoding="utf-8")
    for key, value in (("steps", STEPS), ("eval_every", STEPS), ("checkpoint_every", STEPS)):
        text, n = re.subn(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
        assert n == 1, key
    (tmp / "examples" / "demo.toml").write_text(text, encoding="utf-8")
    return tmp


@pytest.mark.slow
def test_the_first_run_from_the_shell_works_as_written_on_one_device(tmp_path):
    """Each line of the README's first-run block, verbatim (``<run-id>`` filled in), exits 0
    and does what its comment says, on an engine with one CPU device."""
    if not (Path(sys.executable).parent / "gemma-workbench").exists():
        pytest.skip("gemma-workbench is not installed beside this interpreter")
    work = _scratch(tmp_path / "work")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEMMA_WORKBENCH_RUNS")}
    env.update(GEMMA_WORKBENCH_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO),
               GEMMA_WORKBENCH_ENGINE_IDLE_EXIT="120", XLA_FLAGS=FAST_XLA)
    lines = shell_blocks(README.read_text(encoding="utf-8"))[RUN]
    ids: dict[str, str] = {}
    times = []

    def sh(line: str) -> subprocess.CompletedProcess:
        line = line.replace("<run-id>", ids.get("detached", "<run-id>"))
        t0 = time.monotonic()
        done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        times.append((time.monotonic() - t0, line.split("#")[0].strip()))
        assert done.returncode == 0, f"{line}\nexit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
        return done

    try:
        for line in lines:
            words = line.split("#")[0].split()
            assert words[0] == ".venv/bin/gemma-workbench", line
            done = sh(line)
            command = words[1:]
            if command[:2] == ["train", "examples/demo.toml"] and "--detach" in command:
                ids["detached"] = done.stdout.strip().splitlines()[0]
                assert re.fullmatch(r"[\w.-]+", ids["detached"]), done.stdout
            elif command[:1] == ["train"]:
                folder = Path(done.stdout.strip().splitlines()[0])
                assert (folder / "config.toml").is_file() and "completed" in (folder / "status.json").read_text()
                ids["foreground"] = folder.name
            elif command == ["runs"]:
                assert ids["foreground"] in done.stdout and ids["detached"] in done.stdout
            elif command[:2] == ["runs", "attach"]:  # follows the detached run to its end
                assert f"run {ids['detached']} completed" in done.stderr, done.stderr
            elif command[:1] == ["compare"]:
                assert "prompt: Is 17 even or odd?" in done.stdout and "  tuned: " in done.stdout
            elif command[:1] == ["export"]:
                assert (work / "my-adapter" / "adapter_config.json").is_file()
            else:
                pytest.fail(f"a README line this test does not check: {line}")
        assert {"foreground", "detached"} <= set(ids)
    finally:
        subprocess.run([str(work / ".venv/bin/gemma-workbench"), "engine", "stop"], env=env,
                       capture_output=True, timeout=120)
        print("\n".join(f"{s:6.1f} s  {line}" for s, line in times))
