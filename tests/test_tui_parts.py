"""TUI parts that need no terminal: run folding, plots, memory fit, sweep parsing, settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs.state import RunState
from workbench.screens.runs import config_diff, parse_sweep
from workbench.screens.runstate import RunView, event_line
from workbench.settings import Settings, load_settings, save_settings, settings_path
from workbench.widgets.lora_form import trainable_count
from workbench.widgets.memory_fit import DeviceFit, fits_from_estimate
from workbench.widgets.plot import Series, render_plot

DEMO_ARCH = {"num_layers": 4, "embed_dim": 256, "hidden_dim": 1024, "num_heads": 4,
             "head_dim": 64, "num_kv_heads": 1}


def test_run_view_merges_record_and_stream_without_duplicates():
    view = RunView("r1")
    event = {"time": 1.0, "kind": "state", "state": "running", "step": 0}
    view.apply_record(api.RunDetail.from_json({
        "id": "r1", "state": "running", "step": 2, "total_steps": 10,
        "metrics": [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0}],
        "events": [event], "checkpoints": [2]}))

    def item(kind: str, data: dict) -> api.StreamItem:
        return api.stream_item(kind, data, api.RUN_STREAM_ITEMS)

    # the stream replays the events and then goes on
    assert view.apply_stream(item("event", event)) == "event"
    assert view.apply_stream(item("metrics", {"step": 3, "loss": 3.5})) == "metrics"
    assert view.apply_stream(item("metrics", {"step": 3, "eval_loss": 3.9}))
    assert view.apply_stream(item("end", {"state": "completed"})) == "end"
    assert len(view.events) == 1
    assert view.series("loss") == ((1, 2, 3), (5.0, 4.0, 3.5))
    assert view.series("eval_loss") == ((3,), (3.9,))
    assert view.state == RunState.COMPLETED and view.checkpoints == [2]


def test_eta_comes_from_step_times_of_an_active_run():
    view = RunView("r", state=RunState.RUNNING, step=10, total_steps=30,
                   metrics=[{"step": 10, "step_time_s": 0.5}])
    assert view.eta_seconds() == pytest.approx(10.0)
    view.state = RunState.COMPLETED
    assert view.eta_seconds() is None


def test_step_time_leaves_out_the_compiling_first_step():
    # measured on the demo (12:16 UTC): step 1 took 77 s (compile), the next ones ~2 s; the
    # header said 40.82 s/step, ETA 3h22m, at step 2
    metrics = [{"step": 1, "step_time_s": 77.3}, {"step": 2, "step_time_s": 4.4},
               {"step": 3, "step_time_s": 1.9}, {"step": 4, "step_time_s": 2.1}]
    view = RunView("r", state=RunState.RUNNING, step=4, total_steps=300, metrics=metrics)
    assert view.step_time() == pytest.approx(2.1)
    assert view.eta_seconds() == pytest.approx(296 * 2.1)
    assert RunView("r", metrics=metrics[:1]).step_time() is None  # the compile alone: no figure


def test_state_events_read_as_sentences():
    line = event_line({"time": "2026-01-01T12:00:15Z", "kind": "state", "state": "stopped",
                       "step": 12, "message": "stop requested"})
    assert line == "12:00:15 stopped at step 12 stop requested"


def test_plot_draws_every_series_with_a_legend():
    text = render_plot([Series("train", (1, 2, 3), (3.0, 2.0, 1.0)),
                        Series("eval", (3,), (1.5,))], 50, 12, "loss")
    assert "train" in text and "eval" in text and "loss" in text
    assert render_plot([Series("x", (), ())], 50, 12) == ""


def test_memory_fit_verdicts_follow_the_fraction_of_capacity():
    fits = fits_from_estimate([api.DeviceFit(device=i, kind="tpu", bytes=used, capacity_bytes=100)
                               for i, used in enumerate((10, 90, 120))])
    assert [f.status for f in fits] == ["fits", "tight", "exceeds"]
    assert DeviceFit("cpu", 10, None).status == "unknown"


def test_trainable_count_matches_the_closed_form_for_the_demo_model():
    # q: 256→256, k/v: 256→64, o: 256→256, gate/up: 256→1024, down: 1024→256; rank 8, 4 layers
    per_layer = 8 * ((256 + 256) + 2 * (256 + 64) + (256 + 256) + 2 * (256 + 1024) + 1280)
    assert trainable_count(DEMO_ARCH, {"rank": 8, "targets": ("q", "k", "v", "o", "gate",
                                                              "up", "down")}) == 4 * per_layer
    assert trainable_count(DEMO_ARCH, {"rank": 8, "targets": ()}) == 0
    assert trainable_count({}, {"rank": 8, "targets": ("q",)}) is None


def test_sweep_text_sets_rank_alpha_or_targets():
    lora = {"rank": 8, "alpha": 16.0, "targets": ["q", "v"]}
    assert parse_sweep("16", lora)["rank"] == 16
    assert parse_sweep("rank=4 alpha=8 targets=q,k", lora) == {
        "rank": 4, "alpha": 8.0, "targets": ["q", "k"]}
    with pytest.raises(WorkbenchError, match="not a number"):
        parse_sweep("sixteen", lora)
    with pytest.raises(WorkbenchError, match="cannot sweep"):
        parse_sweep("steps=3", lora)


def test_config_diff_lists_only_keys_that_differ():
    a = {"lora": {"rank": 8, "alpha": 16.0}, "train": {"steps": 30}}
    b = {"lora": {"rank": 16, "alpha": 16.0}, "train": {"steps": 30}}
    assert config_diff({"a": a, "b": b}) == [("lora.rank", [8, 16])]


def test_settings_round_trip_and_a_broken_file_gives_defaults():
    save_settings(Settings(theme="workbench-light").with_prompt("hi").with_prompt("2+2?"))
    loaded = load_settings()
    assert loaded.theme == "workbench-light"
    assert loaded.prompt_history == ("2+2?", "hi")
    settings_path().write_text("this is [not toml", encoding="utf-8")
    assert load_settings() == Settings()


def test_quitting_does_not_wait_for_workers_blocked_on_the_engine():
    # measured 12:24 UTC: q while the engine started took 36 s (Python joined the worker
    # threads still connecting); leave_now exits with the code at once
    code = ("import threading, time; from workbench.app import leave_now; "
            "threading.Thread(target=time.sleep, args=(900,)).start(); leave_now(3); "
            "raise SystemExit(9)")
    proc = subprocess.run([sys.executable, "-c", code], timeout=300)  # without: 900 s
    assert proc.returncode == 3
    quiet = subprocess.run([sys.executable, "-c", "from workbench.app import leave_now; "
                            "leave_now(3); raise SystemExit(0)"], timeout=100)
    assert quiet.returncode == 0  # no thread waiting: a normal return
