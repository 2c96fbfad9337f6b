"""Compiling ahead through a real engine process: ``compile_ahead`` and ``compile_jobs``, a
launch after it, ``gemma-workbench prepare``, and the engine's start with the last launched
config. The engine runs on the CPU, where nothing compiles ahead unless forced (``force``,
``prepare --force``, ``GEMMA_WORKBENCH_COMPILE_AHEAD=on``)."""

from __future__ import annotations

import time
import tomllib

import pytest
from fixtures_engine import demo_run_config
from fixtures_runs import demo_overrides

from workbench.cli import main
from workbench.engine_wire import EngineRequestError

LIVE = ("queued", "compiling")


@pytest.fixture(scope="module")
def ahead_engine(engine_factory):
    return engine_factory()


def settled(client, request: int, timeout: float = 300.0):
    """The request's jobs once it is set up and none of them is queued or compiling."""
    t0 = time.monotonic()
    while True:
        reply = client.compile_jobs(request)
        latest = reply.latest
        assert latest is not None and latest.state != "failed", latest
        if latest.request == request and latest.state == "planned" and not any(
                j.state in LIVE for j in reply.jobs):
            return reply
        assert time.monotonic() - t0 < timeout, reply
        time.sleep(0.2)


def test_a_cpu_engine_compiles_nothing_ahead_and_says_the_programs_compile_at_launch(ahead_engine):
    client = ahead_engine.client
    reply = client.compile_ahead(config=demo_run_config())
    assert not reply.ahead and reply.request is None and reply.backend == "cpu"
    assert "compile at launch" in reply.message
    jobs = client.compile_jobs()
    assert not jobs.ahead and "compile at launch" in jobs.message


def test_a_bad_config_is_refused_in_one_line(ahead_engine):
    with pytest.raises(EngineRequestError) as err:
        ahead_engine.client.compile_ahead(config={"lora": {"rank": 0}}, force=True)
    assert err.value.status == 400 and "rank" in str(err.value) and "\n" not in str(err.value)


def test_a_launch_after_compiling_ahead_finds_its_first_step_compiled(ahead_engine):
    client = ahead_engine.client
    cfg = demo_run_config(steps=3)
    reply = client.compile_ahead(config=cfg, force=True)
    assert reply.ahead and reply.request is not None and reply.request.state == "planning"
    assert reply.request.about.startswith("demo · LoRA r4")
    jobs = settled(client, reply.request.request).jobs
    assert {j.what for j in jobs} >= {"train step", "eval step"}
    assert all(j.state == "ready" and j.about == reply.request.about for j in jobs), jobs

    run = client.create_run(cfg)
    detail = client.wait_run(run.id, timeout=300)
    assert detail.state == "completed", detail
    metrics = client.get_run(run.id).metrics
    assert "compile_s" not in metrics[0]  # step 1 compiled nothing in the foreground
    compiles = [e for e in client.get_run(run.id).events if e.get("kind") == "compile"]
    assert all({"program", "state", "seconds"} <= set(e) for e in compiles)
    assert not [e for e in compiles if e["program"] == "train step" and e["state"] == "compiling"
                and metrics[0].get("compile_s")]
    remembered = tomllib.loads((ahead_engine.runtime / "last-config.toml").read_text())
    assert remembered["train"]["steps"] == 3 and remembered["lora"]["rank"] == 4


def test_a_run_whose_step_compiles_says_so_in_its_events_and_step_1s_record(ahead_engine):
    client = ahead_engine.client
    cfg = demo_run_config(steps=2)
    cfg["lora"]["rank"] = 2  # compiled ahead by nobody: step 1 compiles it
    run = client.create_run(cfg)
    assert client.wait_run(run.id, timeout=300).state == "completed"
    detail = client.get_run(run.id)
    assert detail.metrics[0]["compile_s"] > 0
    compiles = [(e["program"], e["state"]) for e in detail.events if e.get("kind") == "compile"]
    assert compiles[:2] == [("train step", "compiling"), ("train step", "ready")], compiles


def test_prepare_follows_the_jobs_until_they_are_ready(ahead_engine, monkeypatch, capsys):
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(ahead_engine.home))
    sets = [w for item in demo_overrides(lora__rank=8, train__steps=3) for w in ("--set", item)]
    assert main(["prepare", *sets]) == 0
    assert "nothing compiles ahead: the programs compile at launch (a CPU engine" in capsys.readouterr().err

    assert main(["prepare", "--force", *sets]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("compiling ahead: demo · LoRA r8 · 8×64 (request ")
    for what in ("train step", "eval step"):  # one line per state seen (polled: a quick one may pass unseen)
        states = [line.split(": ", 1)[1] for line in out if line.startswith(what + ": ")]
        # the first state seen: queued, compiling, or already ready (a job the session's compile
        # cache serves in well under a poll passes both unseen)
        assert states[0] in ("queued", "compiling") or states == [states[-1]], out
        assert states[-1].startswith("ready ("), out
        assert len(states) == len(set(states))

    assert main(["prepare", "--force", "--json", *sets]) == 0  # the same again: compiled before
    import json

    reply = json.loads(capsys.readouterr().out)
    assert reply["latest"]["state"] == "planned"
    assert {j["what"]: j["state"] for j in reply["jobs"]} == {"train step": "ready", "eval step": "ready"}


def test_an_engine_starts_by_compiling_ahead_for_the_last_launched_config(ahead_engine, engine_factory):
    """(Last in the module: it replaces the module's engine with one in the same home.)"""
    ahead_engine.stop()
    if not (ahead_engine.runtime / "last-config.toml").is_file():  # this test alone
        ahead_engine.runtime.mkdir(parents=True, exist_ok=True)
        from adapters_lib.config import config_from_dict

        toml = config_from_dict(demo_run_config(steps=3)).to_toml()
        (ahead_engine.runtime / "last-config.toml").write_text(toml)
    again = engine_factory(home=ahead_engine.home, env={"GEMMA_WORKBENCH_COMPILE_AHEAD": "on"})
    t0 = time.monotonic()
    while (latest := again.client.compile_jobs().latest) is None:
        assert time.monotonic() - t0 < 120, again.log_text()[-2000:]
        time.sleep(0.2)
    rank = tomllib.loads((ahead_engine.runtime / "last-config.toml").read_text())["lora"]["rank"]
    assert latest.about.startswith(f"demo · LoRA r{rank} ")  # the last launched run's, not prepare's
    jobs = settled(again.client, latest.request).jobs
    assert {j.what for j in jobs} >= {"train step", "eval step"}
    assert "compiling ahead for the last launched config" in again.log_text()


def test_after_a_run_its_neighbouring_lengths_compile_ahead_and_a_length_tweak_compiles_nothing(engine_factory):
    """A run's config at twice and half its ``max_length`` compiles ahead on the compile thread
    while it trains (queued at its set-up; on an accelerator, here forced): a run at either
    length then finds its first step compiled."""
    engine = engine_factory(env={"GEMMA_WORKBENCH_NEIGHBOUR_LENGTHS": "on"})
    client = engine.client
    first = client.create_run(demo_run_config(steps=2))  # max_length 64
    assert client.wait_run(first.id, timeout=300).state == "completed"
    t0 = time.monotonic()
    while True:
        jobs = [j for j in client.compile_jobs().jobs if j.about.endswith("max_length 128 and 32")]
        if sum(j.what == "train step" for j in jobs) == 2 and not any(j.state in LIVE for j in jobs):
            break
        assert time.monotonic() - t0 < 300, (jobs, engine.log_text()[-3000:])
        time.sleep(0.2)
    assert all(j.state == "ready" for j in jobs), jobs
    assert {j.what for j in jobs} >= {"set-up", "train step", "eval step"}
    assert sum(j.what == "set-up" for j in jobs) == 2, jobs  # a length's set-up a job: the gate acts on each
    log = engine.log_text()
    assert "compile ahead of max_length 128 (the last run's was 64): set up in" in log
    for length in (128, 32):
        cfg = demo_run_config(steps=2)
        cfg["data"]["max_length"] = length
        run = client.create_run(cfg)
        assert client.wait_run(run.id, timeout=300).state == "completed"
        assert "compile_s" not in client.get_run(run.id).metrics[0], length  # nothing compiled at step 1
