"""Detachable runs through a real engine process, and the faults they must survive.

One story, in order (the tests share the engine home): a detached demo run; its client is
killed mid-stream; a new client reattaches and sees every metric; the engine is killed with
SIGKILL mid-run; a restarted engine shows the run ``interrupted``; ``resume`` continues it
and its loss curve equals an uninterrupted run's (a shorter one: ``BASELINE_STEPS``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fixtures_engine import demo_run_config

from adapters_lib.config import config_from_dict
from workbench.engine_wire import EngineRequestError

# long enough that on a quiet machine (~0.15 s a step) the run still trains when the kill test
# comes, after two `runs attach` subprocesses: at 40 steps it had completed by then (CI, xdist)
STEPS = 80
# a checkpoint every 10 steps: the kill still comes after step 10's, and each of the three runs
# (before the kill, resumed, the baseline) writes half as many (~0.3 s of CPU each)
CONFIG = demo_run_config(steps=STEPS, checkpoint_every=10)
KILL_AFTER_CHECKPOINT = 10
# the uninterrupted run to compare with: the same run, shorter. Its schedule is constant after
# warm-up and the data order does not depend on the length, so its curve is the first 30 steps
# of an 80-step run's: 20 steps past the checkpoint the resumed run starts from (50 steps fewer
# to train than an 80-step baseline: ~7 s of CPU)
BASELINE_STEPS = 30
BASELINE = demo_run_config(steps=BASELINE_STEPS, checkpoint_every=10)


# the Compare warm-up after a run off, as in every engine of the suite (tests/conftest.py; named
# here: the last test checks it, tests/test_warm_compare.py turns it on)
NO_WARM_UP = {"GEMMA_WORKBENCH_WARM_COMPARE": "0"}


@pytest.fixture(scope="module")
def story(engine_factory, tmp_path_factory):
    home = tmp_path_factory.mktemp("engine-runs-home")
    return {"home": home, "first": engine_factory(home=home, env=NO_WARM_UP), "factory": engine_factory}


def _metric_steps(items):
    return [i.data["step"] for i in items if i.type == "metrics"]


def _follow(client, run_id, until_step, since_step=0, timeout=240):
    """Stream the run until a metric at ``until_step`` (or the end); return the items."""
    items = []
    t0 = time.monotonic()
    for item in client.stream_run(run_id, since_step=since_step):
        items.append(item)
        if item.type == "metrics" and item.data["step"] >= until_step:
            break
        if item.type == "end":
            break
        assert time.monotonic() - t0 < timeout, f"no step {until_step} in {timeout} s"
    return items


def test_create_returns_at_once_and_the_run_trains_detached(story):
    client = story["first"].client
    t0 = time.monotonic()
    run = client.create_run(CONFIG)
    assert time.monotonic() - t0 < 5
    assert run.state in ("queued", "running")
    story["run_id"] = run.id
    assert client.list_runs()[0].id == run.id
    with pytest.raises(EngineRequestError) as info:
        client.delete_run(run.id)
    assert info.value.status == 409  # not while it trains


def test_a_second_run_waits_in_the_queue_and_can_be_stopped_and_deleted(story):
    client = story["first"].client
    second = client.create_run(CONFIG)
    assert client.get_run(second.id).state == "queued"
    assert client.stop_run(second.id).state == "stopped"
    assert client.delete_run(second.id).deleted
    assert [r.id for r in client.list_runs()] == [story["run_id"]]


def _attach(home, run_id):
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "runs", "attach", run_id, "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = 0
    for line in proc.stdout:
        item = json.loads(line)
        if item["type"] == "metrics":
            seen = item["data"]["step"]
            if seen >= 2:
                break
    return proc, seen


def test_killing_a_client_mid_stream_leaves_the_run_going(story):
    first = story["first"]
    killed, seen = _attach(first.home, story["run_id"])
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(10)
    assert seen >= 2
    items = _follow(first.client, story["run_id"], until_step=seen + 2, since_step=seen)
    assert _metric_steps(items)[-1] >= seen + 2  # it trained on after its client died
    assert first.alive()


def test_ctrl_c_in_runs_attach_detaches_without_stopping_the_run(story):
    first = story["first"]
    attached, _ = _attach(first.home, story["run_id"])
    attached.send_signal(signal.SIGINT)
    _, err = attached.communicate(timeout=30)
    assert attached.returncode == 0
    assert "detached; the run goes on" in err
    assert first.client.get_run(story["run_id"], metrics=False).state == "running"


def test_reattaching_replays_every_metric_so_far(story):
    client = story["first"].client
    items = _follow(client, story["run_id"], until_step=KILL_AFTER_CHECKPOINT + 1)
    steps = _metric_steps(items)
    assert steps == list(range(1, steps[-1] + 1))  # every step, once, in order
    on_disk = {m["step"]: m["loss"] for m in client.get_run(story["run_id"]).metrics}
    streamed = {i.data["step"]: i.data["loss"] for i in items if i.type == "metrics"}
    assert all(on_disk[s] == loss for s, loss in streamed.items())
    later = [s for s in _metric_steps(_follow(client, story["run_id"], steps[-1], since_step=5))]
    assert later and min(later) == 6


def test_attaching_late_replays_the_set_up_log_lines_no_client_heard(story):
    """Log lines are on no file the stream replays: the hub keeps a training run's last ones,
    so a client attaching mid-set-up (a long GPTQ, a compile) reads what the run is doing."""
    replayed = []
    for item in story["first"].client.stream_run(story["run_id"], since_step=STEPS):
        if item.type == "replayed":
            break
        replayed.append(item)
    logs = [i.data.message for i in replayed if i.type == "log"]
    assert any(m.startswith("set-up") for m in logs), logs


def test_engine_killed_mid_run_leaves_the_run_interrupted_at_next_start(story):
    first = story["first"]
    run_id = story["run_id"]
    t0 = time.monotonic()
    while True:  # a checkpoint at or past step 10 (older ones are pruned), or the run's end
        before = first.client.get_run(run_id, metrics=False)
        if before.state != "running" or max(before.checkpoints, default=0) >= KILL_AFTER_CHECKPOINT:
            break
        assert time.monotonic() - t0 < 300, f"no checkpoint {KILL_AFTER_CHECKPOINT} in 300 s"
        time.sleep(0.05)
    before = first.client.get_run(run_id)
    assert before.state == "running" and before.step < STEPS, f"the run ended before the kill: {before}"
    first.kill()
    story["metrics_before"] = before.metrics
    second = story["factory"](home=story["home"], env=NO_WARM_UP)
    story["second"] = second
    run = second.client.get_run(run_id)
    assert run.state == "interrupted"
    assert max(before.checkpoints) in run.checkpoints  # every checkpoint complete at the kill is kept
    story["resume_from"] = max(run.checkpoints)
    kept = {m["step"] for m in run.metrics}
    assert {m["step"] for m in story["metrics_before"]} <= kept  # nothing lost
    assert any(e.get("state") == "interrupted" for e in run.events)


def test_resume_continues_from_the_checkpoint_to_completion(story, tmp_path):
    client = story["second"].client
    run_id = story["run_id"]
    assert client.resume_run(run_id).state == "queued"
    # the uninterrupted run to compare with, from the CLI: queued behind it (one at a time)
    config = tmp_path / "baseline.toml"
    config.write_text(config_from_dict(BASELINE).to_toml())
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(story["home"])}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "workbench", "train", str(config), "--detach"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 60  # returns at once, whatever the run's length
    story["baseline"] = out.stdout.strip().splitlines()[-1]
    assert client.get_run(story["baseline"], metrics=False).state == "queued"
    resumed = client.wait_run(run_id, timeout=300)
    assert resumed.state == "completed", resumed
    got = client.get_run(run_id)
    assert [e["step"] for e in got.events if e["kind"] == "resumed"] == [story["resume_from"]]
    assert [m["step"] for m in got.metrics] == list(range(1, STEPS + 1))


def test_a_b_compare_streams_tokens_while_the_next_run_trains(story):
    client = story["second"].client
    items = list(client.compare("Is 7 even or odd?", story["run_id"], max_new_tokens=4))
    sides = {i.data.side for i in items if i.type == "token"}
    assert sides == {"base", "tuned"}
    done = items[-1]
    assert done.type == "done" and done.data.step == STEPS
    tuned = "".join(i.data.text for i in items if i.type == "token" and i.data.side == "tuned")
    assert tuned == done.data.tuned
    with pytest.raises(EngineRequestError) as info:
        list(client.compare("", story["run_id"]))
    assert info.value.status == 400


def test_export_writes_the_adapter_through_the_engine(story, tmp_path):
    client = story["second"].client
    out = client.export(story["run_id"], kind="adapter", out=str(tmp_path / "adapter"))
    assert out.result["step"] == STEPS
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert list((tmp_path / "adapter").glob("*.safetensors"))
    with pytest.raises(EngineRequestError) as info:
        client.export(story["run_id"], kind="pickle")
    assert info.value.status == 400


def test_the_loss_curve_after_resume_equals_an_uninterrupted_run(story):
    client = story["second"].client
    assert client.wait_run(story["baseline"], timeout=300).state == "completed"
    got = client.get_run(story["run_id"]).metrics
    want = client.get_run(story["baseline"]).metrics
    assert [m["step"] for m in want] == list(range(1, BASELINE_STEPS + 1))
    assert [m["step"] for m in got][:BASELINE_STEPS] == list(range(1, BASELINE_STEPS + 1))
    assert BASELINE_STEPS > story["resume_from"]  # steps of the resumed run are compared
    losses = [m["loss"] for m in got][:BASELINE_STEPS]
    expected = [m["loss"] for m in want]
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_cli_lists_and_shows_runs_through_the_engine(story):
    env = {**os.environ, "GEMMA_WORKBENCH_HOME": str(story["home"])}
    listed = subprocess.run([sys.executable, "-m", "workbench", "runs", "--json"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    states = {r["id"]: r["state"] for r in json.loads(listed.stdout)}
    assert states == {story["run_id"]: "completed", story["baseline"]: "completed"}
    for spelling in ("list", "ls"):  # what a user of docker, kubectl or ollama types
        again = subprocess.run([sys.executable, "-m", "workbench", "runs", spelling, "--json"],
                               env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and json.loads(again.stdout) == json.loads(listed.stdout)
    shown = subprocess.run([sys.executable, "-m", "workbench", "runs", "show", story["run_id"]],
                           env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"run {story['run_id']}: completed" in shown.stdout
    assert "checkpoints" in shown.stdout
    missing = subprocess.run([sys.executable, "-m", "workbench", "runs", "show", "nope"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith("error: no run 'nope'")


def test_no_compare_warm_up_after_the_runs_when_the_variable_says_0(story):
    """The restarted engine ran two runs to their end (the resumed one, then the baseline, a few
    seconds ago): with ``GEMMA_WORKBENCH_WARM_COMPARE=0`` it warmed no Compare after them."""
    second = story["second"]
    assert second.client.status().warming is None
    assert "Compare warm" not in second.log_text() and "warming Compare" not in second.log_text()
