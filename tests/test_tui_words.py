"""What the screens say, as functions of engine replies (no terminal): the Models detail of
an entry that is not ok, the Train header and memory line, the Compare per-side figures."""

from __future__ import annotations

from adapters_lib.engine import api
from adapters_lib.runs.state import RunState
from workbench.screens.base import EnginePhase, phase_of
from workbench.screens.compare_history import blank_words, side_stats
from workbench.screens.compare_turns import answer_markup, record_text
from workbench.screens.models import model_detail, model_row
from workbench.screens.runstate import RunView
from workbench.screens.train_text import checkpoints_text, header_text, memory_text
from workbench.widgets.waits import Wait

UNREADABLE = {"id": "hf:google/gemma-3-1b-it", "family": "gemma3", "size": "1b",
              "format": "safetensors", "status": "unreadable", "source": "huggingface",
              "reason": "config.json is not valid JSON (line 1)", "path": "/hf/x"}


def model(data: dict) -> api.ModelInfo:
    return api.ModelInfo.from_json(data)


def status(data: dict) -> api.EngineStatus:
    return api.EngineStatus.from_json(data)


def test_an_entry_that_is_not_ok_says_why_and_what_to_do_never_no_problems():
    text = model_detail(model(UNREADABLE))
    assert "✗ unreadable" in text and "config.json is not valid JSON (line 1)" in text
    assert "what to do:" in text and "press r" in text
    assert "no problems" not in text
    assert "Hugging Face cache" in text
    assert model_row(model(UNREADABLE))[1] == "✗ unreadable"
    with_hint = model_detail(model({**UNREADABLE, "hint": "re-download it",
                                    "problems": [UNREADABLE["reason"], "no tokenizer.model"],
                                    "arch": {"num_layers": 26}}))
    assert "what to do:[/] re-download it" in with_hint
    assert "no tokenizer.model" in with_hint and with_hint.count("not valid JSON") == 1
    assert "num_layers = 26" in with_hint


def test_a_gguf_entry_names_its_quantization_and_its_source():
    entry = model({"id": "starter:gemma-3-270m", "format": "gguf", "quant": "Q4_K_M",
                   "status": "ok", "source": "starter"})
    assert model_row(entry)[3] == "gguf Q4_K_M"
    text = model_detail(entry)
    assert "Q4_K_M" in text and "starter package" in text and "✓ ok" in text


def test_train_header_has_eval_loss_step_time_and_eta():
    view = RunView("r", state=RunState.RUNNING, step=20, total_steps=40,
                   metrics=[{"step": 10, "loss": 2.5, "eval_loss": 2.75, "step_time_s": 0.5},
                            {"step": 20, "loss": 2.0, "step_time_s": 0.5}])
    text = header_text(view, "r", "green")
    assert "loss 2.000" in text and "eval 2.750[/]@10" in text
    assert "0.50s/step" in text and "ETA 10s" in text


def test_before_the_first_step_the_header_says_what_the_run_waits_for():
    """Since when first: at 80 columns the header's end is cut, and the time is what moves."""
    view = RunView("r", state=RunState.RUNNING)
    view.add_event({"time": 1000.0, "kind": "state", "state": "running"})
    assert "12s setting up" in header_text(view, "r", "green", now=1012.0)
    from adapters_lib.models.quantize import PROGRESS

    view.add_event({"time": 1020.0, "kind": "log", "message": f"{PROGRESS} nf4 of starter: calibrating"})
    assert "25s GPTQ: rounding the base" in header_text(view, "r", "green", now=1025.0)
    view.add_event({"time": 1030.0, "kind": "log", "message": "set-up 30.0s: mesh 1×1×1"})
    assert "40s compiling the first step" in header_text(view, "r", "green", now=1040.0)
    view.state = RunState.STOPPING
    view.add_metrics({"step": 3, "loss": 2.0})
    view.add_event({"time": 1050.0, "kind": "state", "state": "stopping"})
    assert "5s stopping: writing a checkpoint" in header_text(view, "r", "y", now=1055.0)


def test_memory_line_reads_device_use_against_capacity_or_the_host():
    gpu = status({"devices": [{"id": 0, "kind": "H200", "bytes_in_use": 30 * 2**30,
                               "memory_bytes": 120 * 2**30}]})
    assert "30.0 GiB / 120.0 GiB (25%)" in memory_text(gpu)
    two = status({"devices": [{"id": 0, "kind": "TPU v5 lite", "bytes_in_use": 2**30,
                               "memory_bytes": 16 * 2**30},
                              {"id": 1, "kind": "TPU v5 lite", "bytes_in_use": 4 * 2**30,
                               "memory_bytes": 16 * 2**30}]})
    line = memory_text(two)
    assert "2×TPU v5 lite" in line and "max 4.0 GiB / 16.0 GiB (25%) on #1" in line
    cpu = status({"devices": [{"id": 0, "kind": "cpu", "bytes_in_use": None, "memory_bytes": None}],
                  "memory": {"engine_rss_bytes": 3 * 2**30, "host_bytes": 24 * 2**30}})
    assert "engine 3.0 GiB / 24.0 GiB" in memory_text(cpu)
    assert "waiting for the engine" in memory_text(None)


def test_checkpoints_grow_from_the_stream():
    view = RunView("r", state=RunState.RUNNING, checkpoints=[10])
    view.apply_stream(api.stream_item("event", {"time": 1.0, "kind": "checkpoint", "step": 20},
                                      api.RUN_STREAM_ITEMS))
    assert view.checkpoints == [10, 20]
    assert checkpoints_text(view.checkpoints) == "ckpts (2) 10 20"
    assert checkpoints_text(list(range(10, 80, 10))) == "ckpts (7) … 30 40 50 60 70"


def test_compare_sides_say_tokens_speed_and_stop_reason():
    done = {"tokens": {"base": 12, "tuned": 9}, "tokens_per_s": {"base": 41.5, "tuned": 40.0},
            "stop_reason": {"base": "end_of_turn", "tuned": "max_tokens"}}
    assert side_stats(done, "base") == "12 tokens · 41.5 tok/s · stop: end of turn"
    assert side_stats({"tokens": {"base": 3}}, "base") == "3 tokens"
    one = {"tokens": {"tuned": 1}, "tokens_per_s": {"tuned": 0.0}, "first_token_s": {"tuned": 0.4}}
    assert side_stats(one, "tuned") == "1 token · first 0.4 s"  # no decode after one token: no rate


def test_engine_phase_follows_the_jax_start_up_and_keeps_its_clock():
    loading = status({"jax": {"loading": True, "ready": False, "modules_ready": False}})
    first = phase_of(loading)
    assert first.wait is not None and first.wait.what == "importing JAX"
    assert phase_of(loading, first) is first  # the same wait: the clock keeps counting
    gemma = phase_of(status({"jax": {"loading": False, "ready": True, "modules_ready": False}}), first)
    assert gemma.wait.what == "importing gemma"
    ready = phase_of(status({"jax": {"ready": True, "loading": False, "modules_ready": True},
                             "backend": "cpu", "devices": [{"id": 0, "platform": "cpu"}] * 2}))
    assert ready.wait is None and ready.ready == "engine ✓ cpu×2"
    assert "JAX failed" in phase_of(status({"jax": {"error": "boom"}})).error
    assert "s" in EnginePhase(Wait("engine starting", started=0.0)).markup()
    # the clock first: at 80 columns a long label is cut at its end, never the time
    assert Wait("loading the latest checkpoint (restore + compile the first time)",
                started=0.0, hint="esc cancels").text(now=12.34).startswith("12.3 s · loading")


def test_the_models_screen_scans_this_machine_only_for_a_local_engine():
    from workbench import remote
    from workbench.app import WorkbenchApp
    from workbench.remote.spec import RemoteSpec

    assert WorkbenchApp(remember=False).local_catalog
    remote.select(RemoteSpec(host="tpu-vm"))
    try:
        app = WorkbenchApp(remember=False)
        assert not app.local_catalog and app.remote.host == "tpu-vm"
    finally:
        remote.select(None)


def test_an_answer_of_blank_space_says_so():
    # the demo's base answered "Is 17 even or odd?" with 64 line breaks: the pane looked empty
    assert blank_words("\n" * 64) == "64 line breaks"
    assert blank_words("\n ") == "1 line break and 1 space"
    assert answer_markup("\n" * 3) == "[dim](only blank space: 3 line breaks)[/]"
    assert answer_markup("odd [x]") == "odd \\[x]"
    assert record_text({"prompt": "p", "base": "\n\n", "tuned": "odd"}, "base") == \
        "[dim](only blank space: 2 line breaks)[/]"


def test_a_long_folder_id_keeps_its_start_and_its_name_in_the_table():
    """At 80×24 a local folder's id (its whole path) pushed the status column off screen."""
    from workbench.screens.models import ID_WIDTH, short_id

    entry = model({**UNREADABLE, "id": "local:/tmp/pytest-of-root/pytest-12/weights0/broken-gemma"})
    shown = model_row(entry)[0]
    assert len(shown) == ID_WIDTH and shown.startswith("local:…") and shown.endswith("broken-gemma")
    assert short_id("starter:gemma-3-270m") == "starter:gemma-3-270m"
    assert short_id("x" * 40).startswith("…") and len(short_id("x" * 40)) == ID_WIDTH
    assert "broken-gemma" in model_detail(entry)  # the detail pane names it whole


def test_a_millisecond_step_reads_in_milliseconds():
    """The demo model on a TPU steps in ~1 ms: the header said "0.00s/step" there."""
    view = RunView("r", state=RunState.RUNNING, step=20, total_steps=40,
                   metrics=[{"step": 10, "loss": 2.5, "step_time_s": 0.0012},
                            {"step": 20, "loss": 2.0, "step_time_s": 0.0012}])
    assert "1.2ms/step" in header_text(view, "r", "green")
