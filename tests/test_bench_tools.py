"""The benchmark harness's own tools (no timing: benchmarks are not tests)."""

from __future__ import annotations

import json
import re
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
    assert "| MFU | 28 |" in out.read_text() and "| gpu:H200, 2026-11-29 |" in out.read_text()
    assert (tmp_path / "notes.md").is_file()  # each row's whole note, beside the JSON
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


def test_the_page_keeps_its_text_and_each_table_its_markers_with_short_notes():
    """``python -m bench`` rewrites only what lies between an area's markers; a note longer than
    120 characters is cut at a clause, and every row links to its whole note."""
    sys.path.insert(0, str(ROOT))
    from bench import report

    long = "; ".join(f"clause {i} of a long note about the measure" for i in range(12))
    results = {"a": {"measure": "a", "ours": 2.0, "reference": 1.0, "ratio": 2.0, "note": long,
                     "run_command": "python -m bench --only decode_270m", "run_date": "2026-12-02 15:17 UTC"},
               "b": {"measure": "b", "ours": 1.0, "note": "short (#99)",
                     "run_command": "python -m bench --only train_random", "run_date": "2026-12-01 15:59 UTC"}}
    page = ("# Benchmarks\n\nhand text\n\n<!-- bench:decode (generated by python -m bench) -->\nold\n"
            "<!-- /bench:decode -->\n\nmore hand text\n")
    out = report.render_markdown({}, results, page, "bench/results/notes.md")
    assert out.startswith("# Benchmarks\n\nhand text\n") and out.endswith("more hand text\n")
    assert "old" not in out and "| b |" not in out  # no "cpu" markers in this page: its table is left out
    row = next(line for line in out.splitlines() if line.startswith("| a |"))
    shown = re.search(r"\| ([^|]*) \[more\]\(bench/results/notes\.md#decode_270m\) \|", row).group(1)
    assert len(shown) <= report.NOTE_CHARS and shown.endswith("…") and shown.startswith("clause 0")
    assert "Re-measure: `python -m bench --only decode_270m`. Measured 2026-12-02" in out
    alone = report.render_markdown({}, results)  # a new file: the tables alone
    assert "## Decode" in alone and "## CPU against the references" in alone and "#99" not in alone
    assert "## decode_270m" in report.render_notes({}, results)


def test_the_committed_page_notes_fit_and_link_to_their_detail():
    """BENCHMARKS.md's generated rows as committed: notes of at most 120 characters, each linking
    to its section of ``bench/results/notes.md``."""
    sys.path.insert(0, str(ROOT))
    from bench import report

    notes = (ROOT / "bench" / "results" / "notes.md").read_text()
    rows = [line for line in (ROOT / "BENCHMARKS.md").read_text().splitlines() if "](bench/results/notes.md#" in line]
    assert len(rows) > 50
    for row in rows:
        text, anchor = re.search(r"\| ([^|]*) \[more\]\(bench/results/notes\.md#(\w+)\) \|", row).groups()
        assert len(text) <= report.NOTE_CHARS, row
        assert f"\n## {anchor}\n" in notes, anchor
