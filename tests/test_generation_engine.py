"""Sample, compare and export through a real engine process, on the one tuned-model path.

One engine per module (its own home); one short demo run trained by it (10 steps,
checkpoints at 5 and 10): ~60 s on a busy 2-core machine, most of it the engine's JAX
start-up and the run's compile.
"""

from __future__ import annotations

import pytest
from fixtures_engine import demo_run_config

from workbench.client import EngineRequestError


@pytest.fixture(scope="module")
def run_id(engine):
    run = engine.create_run(demo_run_config(steps=10, checkpoint_every=5), source="<test>")
    done = engine.wait_run(run["id"], timeout=600)
    assert done["state"] == "completed", done
    return run["id"]


def _collect(items):
    texts, done = {}, None
    for item in items:
        if item["type"] == "token":
            side = item["data"].get("side", "text")
            texts[side] = texts.get(side, "") + item["data"]["text"]
        elif item["type"] == "done":
            done = item["data"]
        elif item["type"] == "error":
            raise AssertionError(item["data"])
    return texts, done


def test_compare_done_reply_has_per_side_speed_and_stop_reason(engine, run_id):
    texts, done = _collect(engine.compare("Is 7 even or odd?", run_id, max_tokens=6))
    assert texts["base"] == done["base"] and texts["tuned"] == done["tuned"]
    assert done["step"] == 10
    for side in ("base", "tuned"):
        assert done["stop_reason"][side] in ("stop", "length")
        assert done["tokens"][side] >= 1 and done["tokens_per_s"][side] > 0


def test_sample_streams_the_runs_tuned_answer_with_its_stop_reason(engine, run_id):
    texts, done = _collect(engine.sample("Is 7 even or odd?", run_id=run_id, max_tokens=6, step=5))
    assert texts.get("text", "") == done["text"] and done["step"] == 5
    assert done["stop_reason"] in ("stop", "length") and done["tokens_per_s"] > 0


def test_export_goes_through_the_one_vocabulary_and_never_overwrites(engine, run_id, tmp_path):
    out = tmp_path / "merged"
    reply = engine.export(run_id, kind="merged", format="hf", out=str(out))
    assert reply["result"]["format"] == "hf" and (out / "model.safetensors").is_file()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(EngineRequestError) as err:
        engine.export(run_id, kind="adapter", out=str(tmp_path / "mine"))
    assert err.value.status == 400 and "is not empty" in str(err.value)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(EngineRequestError, match="disagree"):
        engine.export(run_id, kind="adapter", format="hf", out=str(tmp_path / "x"))
