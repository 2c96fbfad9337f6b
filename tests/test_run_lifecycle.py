"""The run lifecycle without JAX: states and their moves, the checkpoint rule, the owner lease,
reconciliation, the one failure path, and the one registry over every run root."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from adapters_lib import runs
from adapters_lib.config import load_config
from adapters_lib.runs import checkpoints as ckpt
from adapters_lib.runs import lease, lifecycle


def _make(root, name="life", now=None):
    return runs.create_run(load_config(None, [f'run.name="{name}"']), root=root, now=now)


@pytest.fixture
def run(tmp_path):
    return _make(tmp_path)


@pytest.fixture
def sleeper():
    """A live process that is not this one (a foreground `train` stands in as any process)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def _write_lease(run, pid, started, *, kind="training", host=None):
    run.owner_path.write_text(json.dumps({"pid": pid, "started": started, "host": host or lease.host(),
                                          "kind": kind, "since": time.time(), "what": "test"}))


# --------------------------------------------------------------------------- states


def test_allowed_moves_pass_and_illegal_ones_are_refused(run):
    run.set_state("running")
    run.write_status("running", step=3)  # a progress write is no move
    run.set_state("completed")
    with pytest.raises(runs.IllegalTransition, match="cannot go from completed to running"):
        run.write_status("running")
    assert run.state == "completed"
    with pytest.raises(ValueError, match="unknown run state"):
        run.write_status("paused")


@pytest.mark.parametrize("path, ok", [
    (["running", "stopping", "stopped", "queued", "running", "failed", "running"], True),
    (["running", "failed", "interrupted", "queued"], True),
    (["stopped", "completed"], False),
    (["running", "stopping", "running"], False),
    (["interrupted", "failed"], False),
])
def test_the_transition_table(path, ok):
    state, legal = "queued", True
    for nxt in path:
        legal = legal and runs.state.can_move(state, nxt)
        state = nxt
    assert legal is ok


def test_expect_makes_a_state_write_compare_and_set(run):
    run.set_state("running")
    assert run.write_status("interrupted", expect=("queued",)) is None
    assert run.state == "running"
    assert run.set_state("interrupted", "gone", expect=("running",))["state"] == "interrupted"
    assert [e["state"] for e in run.events() if e["kind"] == "state"] == ["queued", "running", "interrupted"]


def test_state_files_are_replaced_whole_and_leave_no_temporaries(run):
    for step in range(20):
        run.write_status("queued", step=step)
    assert json.loads(run.status_path.read_text())["step"] == 19
    assert [p.name for p in run.path.iterdir() if p.name.startswith(".")] == []


# --------------------------------------------------------------------------- checkpoint rule


def _ckpt(directory, name, meta=None, *, meta_file="metadata", params=True):
    folder = directory / name
    folder.mkdir(parents=True)
    if params:
        (folder / "params").mkdir()
    if meta is not None:
        (folder / "meta").mkdir()
        (folder / "meta" / meta_file).write_text(json.dumps(meta) if not isinstance(meta, str) else meta)
    return folder


def test_only_whole_finite_numbered_folders_are_checkpoints(tmp_path):
    d = tmp_path / "checkpoints"
    _ckpt(d, "5", {"step": 5, "loss": 1.5, "finite": True})
    _ckpt(d, "6", {"step": 6, "loss": 1.4})  # an older checkpoint without the flag
    _ckpt(d, "7", {"step": 7, "loss": 1.2, "backend": "keras", "finite": True}, meta_file="meta.json")
    _ckpt(d, "8.orbax-checkpoint-tmp", {"step": 8})  # a save in progress (or killed)
    _ckpt(d, ".tmp-9-123", {"step": 9}, meta_file="meta.json")
    _ckpt(d, "10", None)  # killed before its meta
    _ckpt(d, "11", {"step": 11, "finite": False})
    _ckpt(d, "12", '{"step": 12, "loss": NaN}')
    _ckpt(d, "13", {"step": 13}, params=False)
    _ckpt(d, "14", "{torn")
    (d / "15").symlink_to(d / "5", target_is_directory=True)
    assert ckpt.complete_steps(d) == [5, 6, 7]
    assert ckpt.latest_complete(d) == 7
    assert ckpt.latest_complete(tmp_path / "none") is None


@pytest.mark.parametrize("steps, keep, below, deleted", [
    ([5, 10, 15], 3, None, []),
    ([5, 10, 15, 20], 3, None, [5]),
    ([5, 10], 1, 10, []),          # 10 is not confirmed yet: 5 stays beside it
    ([5, 10], 1, 11, [5]),         # the loss after 10 was finite: 10 is enough
    ([5, 10, 15], 1, 15, [5]),
    ([5, 10], 1, None, [5]),       # the run completed
])
def test_retention_never_drops_the_last_confirmed_checkpoint(steps, keep, below, deleted):
    assert ckpt.prune_plan(steps, keep, below) == deleted


def test_a_pinned_checkpoint_outlives_retention():
    assert ckpt.prune_plan([5, 10, 15, 20], 1, None, pinned={10}) == [5, 15]


# --------------------------------------------------------------------------- lease


def test_a_new_run_is_owned_by_the_process_that_made_it(run):
    owner = lease.read(run)
    assert owner.pid == os.getpid() and owner.kind == "queued" and owner.host == lease.host()
    assert lease.is_me(owner) and lease.alive(owner)
    assert math.isfinite(owner.started)


def test_an_owner_is_gone_when_its_pid_is_dead_or_reused(run, sleeper):
    dead = lease.Owner(pid=_dead_pid(), started=time.time(), host=lease.host())
    assert not lease.alive(dead)
    live_start = lease.process_started(sleeper.pid)
    assert lease.alive(lease.Owner(pid=sleeper.pid, started=live_start, host=lease.host()))
    reused = lease.Owner(pid=sleeper.pid, started=live_start - 3600, host=lease.host())
    assert not lease.alive(reused)  # same pid, another process: a pid alone is not enough
    assert lease.alive(lease.Owner(pid=_dead_pid(), started=0.0, host="another-host"))


def test_a_live_trainer_is_exclusive_and_a_queued_lease_is_handed_over(run, sleeper):
    _write_lease(run, sleeper.pid, lease.process_started(sleeper.pid), kind="training")
    with pytest.raises(runs.RunOwned, match=f"pid {sleeper.pid}"):
        lease.claim(run, "training")
    _write_lease(run, sleeper.pid, lease.process_started(sleeper.pid), kind="queued")
    assert lease.claim(run, "training").pid == os.getpid()
    _write_lease(run, _dead_pid(), time.time(), kind="training")
    assert lease.claim(run, "training").pid == os.getpid()  # a dead trainer's lease is stale
    lease.release(run)
    assert not run.owner_path.exists()


# --------------------------------------------------------------------------- reconcile


def test_a_run_whose_owner_died_is_interrupted_and_a_live_one_is_left(tmp_path, sleeper):
    alive, dead, queued = (_make(tmp_path, n) for n in ("alive", "dead", "queued"))
    for r in (alive, dead):
        r.set_state("running")
    _write_lease(alive, sleeper.pid, lease.process_started(sleeper.pid))
    _write_lease(dead, _dead_pid(), time.time())
    _write_lease(queued, _dead_pid(), time.time(), kind="queued")
    assert lifecycle.reconcile(alive)["state"] == "running"
    got = lifecycle.reconcile(dead)
    assert got["state"] == "interrupted" and "stopped unexpectedly" in got["message"]
    assert not dead.owner_path.exists()
    got = lifecycle.reconcile(queued)
    assert got["state"] == "interrupted" and "before the run started" in got["message"]
    assert lifecycle.reconcile(dead)["state"] == "interrupted"  # once


def test_a_run_without_a_lease_falls_back_to_its_status_pid(tmp_path, sleeper):
    with_pid, without = _make(tmp_path, "pid"), _make(tmp_path, "nopid")
    for r in (with_pid, without):
        r.owner_path.unlink()
    with_pid.set_state("running", pid=sleeper.pid)
    without.set_state("running")
    assert lifecycle.reconcile(with_pid)["state"] == "running"
    assert lifecycle.reconcile(without)["state"] == "interrupted"


def test_a_run_this_process_owns_but_no_longer_works_on_is_an_orphan(run):
    run.set_state("running")
    assert lifecycle.reconcile(run, here=True)["state"] == "running"
    assert lifecycle.reconcile(run, here=False)["state"] == "interrupted"


# --------------------------------------------------------------------------- failure


def test_a_failure_is_recorded_once_with_its_reason_and_releases_the_lease(run):
    run.set_state("running")
    err = OSError(27, "File too large", str(run.metrics_path))
    status = lifecycle.record_failure(run, err)
    assert status["state"] == "failed" and "File too large" in status["message"]
    assert status["error"]["traceback"] and not run.owner_path.exists()
    lifecycle.record_failure(run, err)  # the engine seeing the same error again: no second record
    assert [e["state"] for e in run.events() if e["kind"] == "state"] == ["queued", "running", "failed"]
    assert lifecycle.failure_recorded(err)


def test_a_run_whose_folder_vanished_fails_in_memory_and_nothing_is_recreated(run):
    import shutil

    shutil.rmtree(run.path)
    status = lifecycle.record_failure(run, FileNotFoundError(2, "No such file", str(run.path)))
    assert status["state"] == "failed" and "No such file" in status["message"]
    assert run.status()["state"] == "failed" and "is gone" in run.status()["message"]
    assert not run.path.exists()


_REFUSED_ENVELOPE = """
import resource, signal, sys
from adapters_lib.runs import RunDir, lifecycle
run = RunDir(sys.argv[1])
def deep(n):
    if n:
        return deep(n - 1)
    raise OSError(27, "File too large", str(run.metrics_path) + "/" + "x" * 200)
try:
    deep(30)
except OSError as e:
    err = e
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
print(lifecycle.record_failure(run, err)["state"])
"""


def test_a_disk_that_refuses_the_traceback_still_takes_the_reason(run):
    """A real EFBIG (RLIMIT_FSIZE 1 KiB, in a child process): status.json with a 12-frame
    traceback does not fit, the one-line reason does, and the run is failed on disk, not left
    running for the engine to call interrupted."""
    run.set_state("running")
    out = subprocess.run([sys.executable, "-c", _REFUSED_ENVELOPE, str(run.path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "failed"
    status = run.status()
    assert status["state"] == "failed" and "File too large" in status["message"]
    assert "traceback" not in status["error"] and status["error"]["hint"] == "see the engine log"
    assert run.status_path.stat().st_size <= 1024


def test_a_failure_never_overwrites_a_completed_run(run):
    run.set_state("running")
    run.set_state("completed")
    assert lifecycle.record_failure(run, RuntimeError("late"))["state"] == "completed"


# --------------------------------------------------------------------------- registry


def test_one_registry_sees_every_root_for_every_caller(tmp_path):
    from adapters_lib.engine.service import Engine

    custom = tmp_path / "elsewhere"
    cfg = load_config(None, ['run.name="rooted"', f'run.dir="{custom}"'])
    made = runs.Registry().create(cfg)
    assert made.path.parent == custom
    assert str(custom.resolve()) in {str(p) for p in runs.remembered_roots()}
    assert runs.find_run(made.run_id) == made                 # sample/compare/export --run
    assert runs.Registry().find(made.run_id[:-2]) == made  # a unique prefix, as `runs show` takes
    engine = Engine(handlers={}, warm=False)  # not started: no threads, no JAX
    assert engine.find_run(made.run_id).path == made.path
    assert made.run_id in {r.run_id for r in engine.all_runs()}
    assert runs.Registry(tmp_path / "other", remembered=False).all() == []


def test_a_run_lists_its_checkpoints_by_the_one_rule(run):
    _ckpt(run.checkpoints_dir, "4", {"step": 4, "finite": True})
    _ckpt(run.checkpoints_dir, "8.orbax-checkpoint-tmp", {"step": 8})
    assert run.checkpoints() == [4] and ckpt.latest_complete(run.checkpoints_dir) == 4
