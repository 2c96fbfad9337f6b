"""The idle engine warms a finished run's Compare programs (``engine/warm_compare.py``):
the Compare right after training compiles nothing, and a request made while it warms is
answered as it would be without it."""

from __future__ import annotations

import re
import time
import types

import pytest
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
    start = text.index(f"warming Compare for run {run.id}")
    warmed = proc.log_text()[start:]
    assert re.search(rf"run {run.id}: Compare warm-up queued \d+ compile\(s\) behind in [\d.]+ s \(model loaded "
                     r"in [\d.]+ s: request [\d.]+, config [\d.]+, base [\d.]+, adapters [\d.]+, sides [\d.]+\)",
                     warmed), warmed[-3000:]  # the load by phase, for the chip's log
    for name in ("prefill", "decode"):  # compiled by the warm-up ...
        assert f"{name}: compiled in " in warmed, warmed[-3000:]
        _wait_log(proc, f"{name}: program kept for the next engine", after=start)  # ... kept once idle
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


def test_a_runs_start_queues_its_familys_sampler_and_the_warm_up_after_it_finds_them(monkeypatch, tmp_path):
    """``at_run_start`` (the run's ``on_setup``, once its first step is lowered) compiles the
    Compare's sampler and eval's scorer for the run's LoRA family from zero adapters; the model
    the Compare then loads, with the trained adapters, needs no new program; a second run of the family queues nothing; a model the
    cache does not hold is never loaded beside a run."""
    import dataclasses
    from concurrent.futures import wait

    from fixtures_generation import perturbed_lora

    from adapters_lib.config import RunConfig, TrainSpec
    from adapters_lib.engine import warm_compare
    from adapters_lib.models.loader import load_model
    from adapters_lib.runs.registry import create_run
    from adapters_lib.train import step_programs
    from adapters_lib.tuned.gemma import GemmaTuned

    monkeypatch.setenv("GEMMA_WORKBENCH_WARM_COMPARE", "1")
    monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_AHEAD", "on")  # a CPU too
    base = RunConfig(train=TrainSpec(programs="family", rank_bucket=32))
    cfg = dataclasses.replace(base, lora=dataclasses.replace(base.lora, rank=3, alpha=6.0, targets=("q", "v")))
    run = create_run(cfg, root=tmp_path)
    warmer = warm_compare.Warmer(engine=None)
    other = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, source="demo", tokenizer="nowhere.model"))
    assert warmer.at_run_start(other, run) == []  # not held: nothing loaded
    loaded = load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype)  # the run's model, held
    futures = warmer.at_run_start(cfg, run)
    assert len(futures) == 3  # the prefill (prompt buckets 32, 64) with the decode; eval's scorer
    assert not wait(futures, timeout=600).not_done
    assert all(f.exception() is None for f in futures)
    tuned = GemmaTuned(loaded, lora=cfg.lora, adapters=perturbed_lora(loaded, cfg.lora, seed=4), cfg=cfg)
    settings = warm_compare.sampling_settings(run)
    assert tuned.compile_behind(lambda fn: pytest.fail("compiled again"), settings) == []
    again = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, rank=5, alpha=1.0))
    assert warmer.at_run_start(again, run) == []  # the family's: queued before
    seen = []
    warmer.at_run_start = lambda c, r: seen.append((c, r)) or []
    release = step_programs._behind().hold(("compare",), "a run traces its first step")
    try:
        warmer.start_hook(again).on_setup(types.SimpleNamespace(run=run))  # the run's hook: after its set-up
        time.sleep(0.3)
        assert seen == []  # not while the run's first step traces
    finally:
        release()
    t0 = time.monotonic()
    while not seen and time.monotonic() - t0 < 30:
        time.sleep(0.02)
    assert seen == [(again, run)]


def test_off_when_the_variable_says_0(monkeypatch, tmp_path):
    """``GEMMA_WORKBENCH_WARM_COMPARE=0``: neither a run's end nor its start queues anything, where
    the same calls with it on do (the test above). The suite's engines all run with it off
    (``tests/conftest.py``): tests/test_engine_runs.py's story checks that its engine warmed
    nothing after its runs."""
    import dataclasses

    from adapters_lib.config import RunConfig, TrainSpec
    from adapters_lib.engine import warm_compare
    from adapters_lib.models.loader import load_model
    from adapters_lib.runs.registry import create_run

    monkeypatch.setenv("GEMMA_WORKBENCH_WARM_COMPARE", "0")
    monkeypatch.setenv("GEMMA_WORKBENCH_COMPILE_AHEAD", "on")  # a CPU too: only the variable says no
    base = RunConfig(train=TrainSpec(programs="family", rank_bucket=32))
    cfg = dataclasses.replace(base, lora=dataclasses.replace(base.lora, rank=3, alpha=6.0, targets=("q", "v")))
    run = create_run(cfg, root=tmp_path)
    load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype)  # the run's model, held
    warmer = warm_compare.Warmer(engine=None)  # no engine: nothing may get past the switch
    assert warmer.at_run_start(cfg, run) == []
    assert warmer.warm(run) is False
    assert warmer.current is None and warmer.futures == []


def test_a_request_right_after_a_runs_end_skips_the_warm_up_and_one_later_does_not(tmp_path, caplog, monkeypatch):
    """After a run the warm-up waits ``GRACE_S`` for the client's next request: a job that comes
    meanwhile (a tweak launched at once, a Compare) is not held behind the warm-up's model load
    (on the v5e it held a tweak's run 0.2-1.7 s); with none, the warm-up goes on (the real
    scheduler's device thread, a run dir with no checkpoint: it reaches the load and fails
    there, in words)."""
    import logging

    from adapters_lib.config import RunConfig
    from adapters_lib.engine import warm_compare
    from adapters_lib.engine.run_queue import RunQueue
    from adapters_lib.engine.scheduler import Scheduler
    from adapters_lib.runs.registry import create_run

    monkeypatch.setenv("GEMMA_WORKBENCH_WARM_COMPARE", "1")
    scheduler = Scheduler(train=lambda item: None, on_failure=lambda item, err: None, runs=RunQueue())
    scheduler.start()
    warmer = warm_compare.Warmer(engine=types.SimpleNamespace(scheduler=scheduler))
    run = create_run(RunConfig(), root=tmp_path)
    caplog.set_level(logging.INFO, logger="adapters_lib.engine")
    try:
        assert warmer.warm(run, grace=5.0)  # GRACE_S after a run; longer here, for a loaded machine
        time.sleep(0.1)
        assert scheduler.submit(lambda: "answered", "the next request").result(timeout=30) == "answered"
        # not after a load: the warm-up saw the request in its grace and never began
        assert f"run {run.run_id}: Compare warm-up skipped (other work came within 5 s)" in caplog.text
        assert "warming Compare" not in caplog.text and warmer.current is None
        caplog.clear()
        assert warmer.warm(run, grace=0.05)
        deadline = time.monotonic() + 60
        while "Compare warm-up failed" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        assert f"warming Compare for run {run.run_id}" in caplog.text and "skipped" not in caplog.text
    finally:
        scheduler.shutdown(lambda item: None, timeout=30)
