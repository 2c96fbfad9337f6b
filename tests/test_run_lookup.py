"""Finding and deleting a run by what the user typed: an exact id or a unique prefix, never a
suffix, never through a symbolic link (``runs delete ta`` once deleted ``…-zeta``).

The engine half runs a real engine process (no JAX needed: lookup and delete import nothing).
"""

from __future__ import annotations

import os

import pytest

from adapters_lib import runs
from adapters_lib.config import load_config
from adapters_lib.errors import WorkbenchError


def _make(root, name, now=0.0):
    return runs.create_run(load_config(None, [f'run.name="{name}"']), root=root, now=now)


def _stopped(root, name, now=0.0):
    """A run nobody works on (a queued run of this live test process is left alone)."""
    run = _make(root, name, now)
    runs.lifecycle.settle(run, "stopped", "made by the test")
    return run


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "runs"
    r.mkdir()
    return r


def test_a_suffix_never_names_a_run(root):
    zeta = _make(root, "zeta")
    with pytest.raises(runs.NoSuchRun, match="no run 'ta'"):
        runs.find_run("ta", root)
    with pytest.raises(runs.NoSuchRun):
        runs.find_run("zeta", root)  # the name part alone is a suffix too
    assert runs.find_run(zeta.run_id, root) == zeta
    assert runs.find_run(zeta.run_id[:10], root) == zeta  # a unique prefix


def test_the_id_as_the_train_screen_shows_it_names_the_run(root):
    """The Train screen shows ``HHMMSS-name`` (the date dropped): what a user copies from it
    names the run, by the same prefix rule; the name alone still names nothing."""
    run = _make(root, "answer-format-270m", now=1_000_000)
    shown = runs.registry.short_id(run.run_id)
    assert shown == run.run_id[9:] and shown[:6].isdigit()
    assert runs.find_run(shown, root) == run
    assert runs.find_run(shown[:6], root) == run
    with pytest.raises(runs.NoSuchRun):
        runs.find_run("answer-format-270m", root)
    other = _make(root, "answer-format-1b", now=1_000_000)  # the same second: ambiguous by time
    with pytest.raises(runs.AmbiguousRun):
        runs.find_run(shown[:6], root)
    assert runs.find_run(runs.registry.short_id(other.run_id), root) == other


def test_an_ambiguous_prefix_names_the_candidates(root):
    a = _make(root, "alpha", now=0)
    b = _make(root, "beta", now=0)
    with pytest.raises(runs.AmbiguousRun) as info:
        runs.find_run(a.run_id[:8], root)
    assert a.run_id in str(info.value) and b.run_id in str(info.value)
    assert runs.find_run(a.run_id, root) == a


def test_an_empty_id_names_nothing(root):
    _make(root, "only")
    with pytest.raises(runs.NoSuchRun):
        runs.select_run("", runs.list_runs(root), [root])


def test_a_symlinked_run_is_not_listed_and_is_refused_by_name(root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real = _make(elsewhere, "precious")
    link = root / real.run_id
    link.symlink_to(real.path, target_is_directory=True)
    assert runs.list_runs(root) == []
    with pytest.raises(runs.LinkedRun, match="symbolic link"):
        runs.find_run(real.run_id, root)
    with pytest.raises(runs.LinkedRun):
        runs.find_run(str(link), root)  # given as a path, too
    with pytest.raises(runs.LinkedRun):
        runs.delete_run_dir(runs.RunDir(link), [root])
    assert link.is_symlink() and (real.path / "config.toml").is_file()


def test_delete_removes_the_run_and_nothing_a_link_inside_points_at(root, tmp_path):
    keep = tmp_path / "user-data"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    run = _make(root, "doomed")
    (run.path / "data-link").symlink_to(keep, target_is_directory=True)
    runs.delete_run_dir(run, [root])
    assert not run.path.exists()
    assert (keep / "notes.txt").read_text() == "mine"


def test_delete_refuses_a_folder_outside_the_known_roots(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    run = _make(other, "stray")
    with pytest.raises(WorkbenchError, match="not in a runs folder"):
        runs.delete_run_dir(run, [root])
    (run.path / "config.toml").unlink()
    with pytest.raises(WorkbenchError, match="not a run directory"):
        runs.delete_run_dir(run, [other])
    assert run.path.is_dir()


# --------------------------------------------------------------------------- through the engine


@pytest.fixture(scope="module")
def lookup_engine(engine_factory, tmp_path_factory):
    home = tmp_path_factory.mktemp("lookup-home")
    root = home / "data" / "runs"
    root.mkdir(parents=True)
    proc = engine_factory(home=home, args=["--no-warm"], start=False)
    return proc, root


def test_the_engine_deletes_by_exact_id_or_prefix_only(lookup_engine):
    from workbench.engine_wire import EngineRequestError

    proc, root = lookup_engine
    zeta = _stopped(root, "zeta")
    other = _stopped(root, "other", now=86400 * 400)
    client = proc.start() if not proc.alive() else proc.client
    assert {r.id for r in client.list_runs()} == {zeta.run_id, other.run_id}
    with pytest.raises(EngineRequestError) as info:
        client.delete_run("ta")
    assert info.value.status == 404
    assert zeta.path.is_dir()
    assert client.delete_run(other.run_id[:12]).id == other.run_id
    assert not other.path.exists() and zeta.path.is_dir()


def test_the_engine_refuses_to_delete_a_symlinked_run_in_words(lookup_engine, tmp_path):
    from workbench.engine_wire import EngineRequestError

    proc, root = lookup_engine
    real = _stopped(tmp_path, "linked-away")
    os.symlink(real.path, root / real.run_id)
    client = proc.start() if not proc.alive() else proc.client
    with pytest.raises(EngineRequestError) as info:
        client.delete_run(real.run_id)
    assert info.value.status == 409 and "symbolic link" in str(info.value)
    assert (real.path / "config.toml").is_file() and (root / real.run_id).is_symlink()
    assert "Traceback" not in proc.log_text()


def test_two_runs_made_in_one_second_under_two_folders_get_two_ids(tmp_path, monkeypatch):
    """The registry's runs of every root answer to one id each: a run made in the same second
    with the same name as one in another remembered folder takes the next id (``-2``), so a
    command that names the new run finds it and not the other (a CLI that followed the other,
    a completed 2-step run, once reported the new 5,000-step run "completed")."""
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path / "home"))
    registry = runs.Registry()
    first = registry.create(load_config(None, ['run.name="demo"', f'run.dir="{tmp_path / "a"}"']), now=7.0)
    second = registry.create(load_config(None, ['run.name="demo"', f'run.dir="{tmp_path / "b"}"']), now=7.0)
    assert second.run_id == first.run_id + "-2" and second.path.parent == tmp_path / "b"
    assert registry.find(second.run_id) == second and registry.find(first.run_id) == first
