"""The idle engine warms a finished run's Compare programs (#31, ``engine/warm_compare.py``):
the Compare right after training compiles nothing, and a request made while it warms is
answered as it would be without it."""

from __future__ import annotations

import time

from fixtures_engine import demo_run_config

WARM = {"GEMMA_WORKBENCH_WARM_COMPARE": "1"}


def _text(items, side: str | None = None) -> tuple[str, dict]:
    text, done = "", {}
    for item in items:
        assert item.type != "error", item.data
        if item.type == "token" and (side is None or item.data.side == side):
            text += item.data.text
        elif item.type == "done":
            done = item.data.to_json()
    return text, done


def _wait_log(proc, needle: str, after: int = 0, timeout: float = 300.0) -> str:
    t0 = time.monotonic()
    while needle not in proc.log_text()[after:]:
        assert time.monotonic() - t0 < timeout, proc.log_text()[-3000:]
        time.sleep(0.2)
    return proc.log_text()[after:]


def test_after_a_run_the_engine_warms_its_compare_and_a_request_meanwhile_is_answered(engine_factory):
    proc = engine_factory(env=WARM)
    client = proc.client
    cfg = demo_run_config(steps=2, checkpoint_every=2, eval_every=2)
    run = client.create_run(cfg, source="<test>")
    assert client.wait_run(run.id, timeout=600).state == "completed"
    text = _wait_log(proc, f"run {run.id}: Compare warmed in ")
    warmed = text[text.index(f"warming Compare for run {run.id}"):]
    for name in ("prefill", "decode"):  # compiled by the warm-up, kept in the program store
        assert f"{name}: program kept for the next engine" in warmed, warmed[-3000:]
    assert client.status().warming is None
    mark = len(proc.log_text())
    # the user's Compare right after training (the TUI's defaults): nothing compiled
    _, done = _text(client.compare("What is the capital of France?", run.id), side="tuned")
    assert done["complete"] and done["tokens"]["base"] >= 1 and done["tokens"]["tuned"] >= 1
    after = proc.log_text()[mark:]
    for name in ("prefill", "decode"):
        assert f"{name}: " not in after, after  # not compiled, not even read back: in memory
    assert not done.get("saved") and not list(proc.home.rglob(f"{run.id}/compare/*"))
    # a request made as the next run's warm-up starts: answered as without it
    second = client.create_run(cfg, source="<test>")
    assert client.wait_run(second.id, timeout=600).state == "completed"
    during = _text(client.sample("Say hi.", run_id=run.id, max_new_tokens=5))
    if f"warming Compare for run {second.id}" in proc.log_text()[mark:]:  # it started: it ends
        _wait_log(proc, f"run {second.id}: Compare warm", after=mark)  # (no warm-up at all when
    # the request was already waiting as the run ended: the suite met that race once)
    again = _text(client.sample("Say hi.", run_id=run.id, max_new_tokens=5))
    assert during[1]["tokens"] >= 1 and during[1]["complete"]
    assert (during[0], during[1]["tokens"]) == (again[0], again[1]["tokens"])  # greedy: the same


def test_off_when_the_variable_says_0(engine_factory):
    proc = engine_factory(env={"GEMMA_WORKBENCH_WARM_COMPARE": "0"})
    run = proc.client.create_run(demo_run_config(steps=1, checkpoint_every=1, eval_every=1),
                                 source="<test>")
    assert proc.client.wait_run(run.id, timeout=600).state == "completed"
    assert proc.client.status().warming is None
    time.sleep(1.0)
    assert "Compare warm" not in proc.log_text() and "warming Compare" not in proc.log_text()
