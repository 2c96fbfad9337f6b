"""In one engine: a run, a Compare, a run with another rank, alpha and targets (a LoRA family:
``train.programs = "family"``), a Compare — the second run's Compare (and its warm-up)
compiles no sampler program, and a run that follows a warm-up starts at once (the
warm-up compiles behind).

One engine for both (its Compare warm-up on; one engine start and two runs fewer than an
engine each) and its first run: the warm-up test runs first, while the family's sampler
programs are not compiled yet, so that the first run's warm-up has them to compile behind the
next run."""

from __future__ import annotations

import time

import pytest
from fixtures_engine import demo_run_config

FAMILY = demo_run_config(steps=2, checkpoint_every=2, programs="family")


@pytest.fixture(scope="module")
def family_engine(engine_factory):
    return engine_factory(env={"GEMMA_WORKBENCH_WARM_COMPARE": "1"})


@pytest.fixture(scope="module")
def family_run(family_engine) -> str:
    """A completed run of the family (its id), the first in the engine: both tests start from it."""
    run = family_engine.client.create_run(FAMILY, source="<test>")
    assert family_engine.client.wait_run(run.id, timeout=600).state == "completed"
    return run.id


def _compare(client, run_id: str) -> dict:
    done = {}
    for item in client.compare("What is the capital of France?", run_id, max_new_tokens=6):
        assert item.type != "error", item.data
        if item.type == "done":
            done = item.data.to_json()
    assert done["complete"] and done["tokens"]["tuned"] >= 1
    return done


def _programs(log: str) -> list[str]:
    """The sampler programs an engine compiled or read back (the program store's log lines; not
    its copies for the next engine, written later, when the engine is idle)."""
    return [line for line in log.splitlines()
            if ("prefill: " in line or "decode: " in line) and "kept for the next engine" not in line]


def _warm_up_seen(proc, run_id: str, ended: bool = False) -> None:
    """Until ``run_id``'s Compare warm-up was queued or skipped (``ended``: and its compiles
    ended, ``status.warming`` clear)."""
    log = proc.log_text()
    t0 = time.monotonic()
    while f"run {run_id}: Compare warm-up queued" not in log and f"run {run_id}: Compare warm-up skipped" not in log:
        assert time.monotonic() - t0 < 120, log[-3000:]
        time.sleep(0.1)
        log = proc.log_text()
    while ended and proc.client.status().warming is not None:
        assert time.monotonic() - t0 < 300, proc.log_text()[-3000:]
        time.sleep(0.1)


def _fully_warmed(proc, run_id: str) -> None:
    """Until a Compare warm-up of ``run_id`` compiled all its programs: the one its end queued
    may have been skipped or dropped (another run came), so ``prepare_compare`` queues one more
    on the idle engine and its end is awaited."""
    _warm_up_seen(proc, run_id, ended=True)
    mark = len(proc.log_text())
    reply = proc.client.prepare_compare(run_id)
    assert reply.queued, reply.message
    t0 = time.monotonic()
    while f"run {run_id}: Compare warmed in " not in proc.log_text()[mark:]:
        assert time.monotonic() - t0 < 300, proc.log_text()[-3000:]
        time.sleep(0.1)


def test_a_run_after_a_warm_up_starts_while_its_programs_compile_behind(family_engine, family_run):
    proc = family_engine
    client = proc.client
    _warm_up_seen(proc, family_run)
    assert client.prepare_compare(family_run).queued in (True, False)  # answered at once either way
    started = time.monotonic()
    second = client.create_run(FAMILY, source="<test>")
    assert client.wait_run(second.id, timeout=600).state == "completed"
    assert time.monotonic() - started < 60


def test_a_run_with_another_rank_compiles_no_sampler_program(family_engine, family_run):
    proc = family_engine
    client = proc.client
    _fully_warmed(proc, family_run)  # every program of the family's Compare and eval: compiled
    _compare(client, family_run)
    assert _programs(proc.log_text())  # the family's programs: this engine compiled them
    second = {**FAMILY, "lora": {"rank": 8, "alpha": 3.0, "targets": ["q", "v"]}}
    mark = len(proc.log_text())  # from here: the other run, its warm-up, its Compare
    other = client.create_run(second, source="<test>")
    assert client.wait_run(other.id, timeout=600).state == "completed"
    _warm_up_seen(proc, other.id, ended=True)
    _compare(client, other.id)
    assert _programs(proc.log_text()[mark:]) == []
