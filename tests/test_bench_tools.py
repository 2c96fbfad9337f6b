"""The benchmark harness's own tools (no timing: benchmarks are not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_stand_ins_cover_only_missing_packages():
    code = textwrap.dedent("""
        import sys
        from bench import import_stubs
        print(import_stubs.install(("wb_surely_missing_pkg", "json")))
        import json
        from wb_surely_missing_pkg.sub import Writer
        class Mine(Writer):  # gemma's imports subclass such names
            pass
        assert json.dumps([1]) == "[1]"  # the installed package is untouched
        assert Writer()() is Writer and not Writer
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['wb_surely_missing_pkg']"


def test_merge_keeps_rows_from_another_machine(tmp_path):
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"meta": {"machine": "gpu:H200", "date": "2026-11-29"},
                               "results": {"MFU": {"measure": "MFU", "ours": 28.0, "unit": "%"}}}))
    latest = tmp_path / "latest.json"
    latest.write_text(json.dumps({"meta": {"machine": "cpu"}, "results": {
        "speed": {"measure": "speed", "ours": 2.0, "reference": 1.0, "ratio": 2.0}}}))
    out = tmp_path / "BENCHMARKS.md"
    run = subprocess.run([sys.executable, "-m", "bench", "--merge", str(gpu), "--json", str(latest),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    merged = json.loads(latest.read_text())["results"]
    assert set(merged) == {"speed", "MFU"} and merged["MFU"]["machine"] == "gpu:H200"
    assert "| MFU | 28 |" in out.read_text() and "[gpu:H200, 2026-11-29]" in out.read_text()
    bad = subprocess.run([sys.executable, "-m", "bench", "--merge", str(tmp_path / "none.json"), "--json",
                          str(latest), "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no results" in bad.stderr


def test_quick_leaves_out_only_the_demo_twins_of_the_real_270m_rows():
    code = textwrap.dedent("""
        from bench import __main__ as bench_main
        from bench import catalog_scan, measures, mfu, real_270m, ui_measures  # noqa: F401 - register
        quick, full = bench_main.selected(None, True), bench_main.selected(None, False)
        assert set(full) == set(measures.MEASURES) and set(full) - set(quick) == measures.NOT_QUICK
        assert measures.NOT_QUICK == {"train_random", "train_gsm8k", "memory_270m", "ab_pair", "keras_train"}
        assert {"real_270m_train", "real_270m_gsm8k", "real_270m_gsm8k_bf16", "real_270m_memory", "real_270m_ab",
                "catalog_scan"} <= set(quick)
        assert bench_main.selected(["ab_pair"], True) == ["ab_pair"]  # --only runs what it names
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_loop_names_why_the_engine_died(tmp_path):
    """``bench.tpu_loop``: when the engine dies mid-loop, the "[loop]" line (all that the chip's
    call keeps) carries the engine log's fatal error, as the v5e's crash printed it."""
    sys.path.insert(0, str(ROOT))
    from bench.tpu_loop import _engine_death

    log = tmp_path / "engine.log"
    log.write_text("2026-12-07 12:14:46,725 INFO device adapters_lib.engine: run x: starting\n"
                   "SystemError: deallocated BytesIO object has exported buffers\n"
                   "Fatal Python error: Segmentation fault\n\n"
                   "Thread 0x00007ebf255ff6c0 (most recent call first):\n"
                   '  File "/work/main/adapters_lib/train/reaper.py", line 55 in _run\n')
    assert _engine_death(log) == ("; the engine log: SystemError: deallocated BytesIO object has "
                                  "exported buffers / Fatal Python error: Segmentation fault")
    log.write_text("2026-12-07 11:56:03,619 INFO device adapters_lib.engine: run y: completed\n")
    assert _engine_death(log).endswith("run y: completed")
    assert _engine_death(tmp_path / "none.log") == ""
