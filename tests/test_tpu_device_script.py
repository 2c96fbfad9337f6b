"""The TPU device script and its measures, on this machine's CPU (CI has no accelerator).

``scripts/tpu_device.sh check NAME`` runs ``python -m bench.tpu_speed NAME`` on a TPU chip,
where each check costs minutes of device time: a measure that breaks on an argument
must break here first. ``--dry`` runs the same code on the CPU with the demo model's shape.
``ce`` runs as ``bench.tpu_speed``'s ``main(argv)`` in the test's process; the others, which
start processes or compile threads of their own, in a new one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_flags import FAST_XLA

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "tpu_device.sh"


def _env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    env["XLA_FLAGS"] = FAST_XLA  # one CPU device, as on one chip; the suite's quick LLVM back end
    return env


@pytest.fixture
def in_process(monkeypatch):
    """``python -m bench.tpu_speed NAME ARGS...`` as its ``main(argv)`` in this process: the
    same code from the same arguments, without a new process's imports (JAX, flax, the
    project: ~2 s of CPU each); ``shapes.DRY``, which ``main`` sets, is put back after."""
    from bench.tpu_speed import __main__ as command
    from bench.tpu_speed import shapes

    monkeypatch.setattr(shapes, "DRY", shapes.DRY)
    return command.main


def test_the_device_script_names_its_checks_and_refuses_a_missing_bundle():
    listed = subprocess.run(["bash", str(SCRIPT), "check", "--list"], capture_output=True, text=True,
                            timeout=30, check=True).stdout.split()
    assert {"jax", "ce", "flow", "tui", "speed", "first-step", "decode", "big", "memory", "bench"} <= set(listed)
    usage = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "build" in usage.stdout and "check NAME" in usage.stdout
    if Path("/tmp/tpu-parts/COUNT").exists():  # parts received here: installing them is not a test's
        return
    # `install` with no parts received: one line, exit 1 (nothing unpacked)
    no_parts = subprocess.run(["bash", str(SCRIPT), "install"], capture_output=True, text=True, timeout=30)
    assert no_parts.returncode == 1
    assert no_parts.stderr.strip() == "error: no parts in /tmp/tpu-parts (receive them first)"


def test_the_memory_check_writes_the_estimate_beside_xlas_figure(tmp_path):
    """``check memory``'s code path (``bench.memory_fit`` in a subprocess, ``--out``): a row a
    shape with XLA's compiled total and the estimate within 10 %."""
    res = subprocess.run([sys.executable, "-m", "bench.tpu_speed", "memory", "--dry", "--out", str(tmp_path)],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"returncode": 0' in res.stdout, res.stdout[-2000:]
    rows = json.loads((tmp_path / "memory_fit.json").read_text())
    assert [(r["batch"], r["seq"], r["remat"]) for r in rows] == [(2, 128, False)]
    row = rows[0]
    assert row["xla"]["total"] > 0 and row["estimate"]["total"] > 0
    assert abs(row["estimate"]["total"] / row["xla"]["total"] - 1) <= 0.10, row


def test_the_first_step_check_reads_the_program_store_back_in_a_new_process(tmp_path):
    """``check first-step``: a cold process fills the program store, a warm one reads the train
    step back instead of compiling it, and each then relaunches with its weights held (the
    engine's next run): the kept programs, then the store read back."""
    res = subprocess.run([sys.executable, "-m", "bench.tpu_speed", "first-step", "--dry", "--out", str(tmp_path)],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    cold, warm = json.loads((tmp_path / "first_step.json").read_text())["rows"]
    assert cold["program_store"]["compiled"] >= 1 and cold["program_store"]["stored"] >= 1, cold
    assert warm["program_store"]["loaded"] >= 1 and warm["program_store"]["compiled"] == 0, warm
    assert warm["program_store_after"]["loaded"] > warm["program_store"]["loaded"], warm  # the forgotten relaunch
    for row in (cold, warm):
        assert 0 < row["relaunch_kept_s"] and 0 < row["relaunch_store_s"] < row["process_wall_s"], row


def test_the_ce_check_times_each_kernel_and_holds_them_to_xlas_loss(tmp_path, in_process):
    """``check ce``: the cross-entropy alone by XLA's chunked path and both Pallas kernels (in
    the interpreter here), each kernel's loss and ∂hidden beside XLA's, then a timed row each."""
    assert in_process(["ce", "--dry", "--out", str(tmp_path)]) == 0
    rows = {r["measure"]: r for r in json.loads((tmp_path / "ce.json").read_text())["rows"]}
    for kernel in ("splash", "flash (default blocks)"):
        check = rows[f"ce check {kernel}"]
        assert abs(check["loss"] / check["loss_xla"] - 1) < 1e-5, check
        assert check["grad_max_abs_diff"] <= 0.02 * check["grad_max_abs"], check
    for name in ("xla", "splash", "flash (default blocks)"):
        assert rows[f"ce {name}"]["ms"] > 0, rows


def test_the_compile_check_times_each_flag_set_in_its_own_process(tmp_path):
    """``check compile`` (``bench.compile_time``): a row a flag set, each compiled in a fresh
    process (libtpu reads its flags once) with the wall and CPU seconds and XLA's figures; the
    flag words become LIBTPU_INIT_ARGS as written or with ``--`` added, ``none`` none.

    The demo's step at the memory check's shape (2 × 128, ``memory_fit.point`` both): after that
    check, the test session's compile cache serves the program (~4 s of CPU less); the row and its
    figures are the same either way (alone, this test compiles it)."""
    from bench.compile_time import flag_args

    assert flag_args("none") == ""
    assert flag_args("xla_a=1 --xla_b=true") == "--xla_a=1 --xla_b=true"
    out = tmp_path / "compile_time.json"
    env = _env()
    env.pop("LIBTPU_INIT_ARGS", None)
    res = subprocess.run([sys.executable, "-m", "bench.compile_time", "--model", "demo", "--batch", "2",
                          "--seq", "128", "--flags", "none", "--out", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert "error" not in row, row
    assert row["device_kind"] == "cpu" and row["flags"] == ""
    assert 0 < row["build_and_compile_s"] < row["process_s"] and row["cpu_s"] > 0, row
    assert row["xla_total_gib"] > 0, row


def test_the_behind_check_runs_a_narrow_batch_wide_until_its_own_program_is_compiled(tmp_path):
    """``check behind``: the batch with few loss positions runs at once in the compiled wide
    program (a step, not a compile), then in its own once that compiled in the background
    (in a process of its own: its compile thread and programs stay out of the suite's)."""
    res = subprocess.run([sys.executable, "-m", "bench.tpu_speed", "behind", "--dry", "--out", str(tmp_path)],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads((tmp_path / "behind.json").read_text())["rows"]
    assert row["slots_few"] < row["slots_every"] and row["eval_compiles_started"] == 1, row
    assert row["few_first_call_s"] < row["first_step_s"] and row["ran_own"], row
