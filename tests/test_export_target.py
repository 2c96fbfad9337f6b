"""Exports never delete what the user made: staged beside the target, swapped in whole.

The refusals run before any model is loaded, so most of these take milliseconds; the
re-export tests use the session's trained demo run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters_lib import tuned
from adapters_lib.errors import WorkbenchError
from adapters_lib.export import target as T
from workbench.cli import main


def _user_tree(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"notes.txt": "my notes\n", "src/main.py": "print('hi')\n"}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return files


def _intact(folder: Path, files: dict[str, str]) -> None:
    assert sorted(T.files_under(folder)) == sorted(files)
    for name, text in files.items():
        assert (folder / name).read_text() == text


def _one_line_error(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def _write(files: dict[str, bytes]):
    def write(stage: Path) -> None:
        stage.mkdir()
        for name, data in files.items():
            (stage / name).write_bytes(data)
    return write


def _no_staging_left(parent: Path) -> None:
    assert not [p.name for p in parent.iterdir() if ".export-" in p.name]


# --------------------------------------------------------------------------- the target rules


def test_a_new_or_empty_folder_receives_the_export_with_its_marker(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new" / "deeper", empty):
        got = T.write_export(out, _write({"a.bin": b"1"}), {"format": "adapter", "run_id": "r"})
        assert got == out.resolve()
        marker = json.loads((out / T.MARKER).read_text())
        assert marker["tool"] == "gemma-workbench" and marker["files"] == ["a.bin"]
        assert marker["run_id"] == "r" and (out / "a.bin").read_bytes() == b"1"
    _no_staging_left(tmp_path)


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_with_user_files_is_refused_with_or_without_force(tmp_path, force):
    out = tmp_path / "mine"
    files = _user_tree(out)
    with pytest.raises(WorkbenchError) as err:
        T.write_export(out, _write({"a.bin": b"1"}), {}, force=force)
    assert str(out) in str(err.value)
    assert ("no " + T.MARKER in str(err.value)) is force
    _intact(out, files)
    _no_staging_left(tmp_path)


def test_an_earlier_export_is_replaced_only_with_force_and_nothing_of_it_survives(tmp_path):
    out = tmp_path / "exp"
    T.write_export(out, _write({"old-1.bin": b"o", "old-2.bin": b"o"}), {"run_id": "r", "step": 1})
    with pytest.raises(WorkbenchError, match=r"earlier export \(run r step 1\).*--force"):
        T.write_export(out, _write({"new.bin": b"n"}), {})
    T.write_export(out, _write({"new.bin": b"n"}), {"run_id": "r", "step": 2}, force=True)
    assert T.files_under(out) == sorted([T.MARKER, "new.bin"])
    assert json.loads((out / T.MARKER).read_text())["step"] == 2
    _no_staging_left(tmp_path)


def test_force_leaves_an_earlier_export_alone_when_the_user_added_files_to_it(tmp_path):
    out = tmp_path / "exp"
    T.write_export(out, _write({"weights.bin": b"w"}), {})
    (out / "README.md").write_text("my model card\n")
    with pytest.raises(WorkbenchError, match="files it did not write \\(README.md\\)"):
        T.write_export(out, _write({"new.bin": b"n"}), {}, force=True)
    assert (out / "README.md").read_text() == "my model card\n" and (out / "weights.bin").exists()


def test_a_forged_or_foreign_marker_is_not_an_export_of_this_tool(tmp_path):
    out = tmp_path / "exp"
    out.mkdir()
    (out / T.MARKER).write_text(json.dumps({"tool": "something-else", "files": []}))
    (out / "data.bin").write_bytes(b"d")
    with pytest.raises(WorkbenchError, match="not an export of gemma-workbench"):
        T.write_export(out, _write({"a": b""}), {}, force=True)
    assert (out / "data.bin").read_bytes() == b"d"


def test_a_failing_export_leaves_the_earlier_one_as_it_was(tmp_path):
    out = tmp_path / "exp"
    T.write_export(out, _write({"good.bin": b"g"}), {"step": 1})
    before = {p: (out / p).read_bytes() for p in T.files_under(out)}

    def half_then_fail(stage: Path) -> None:
        stage.mkdir()
        (stage / "partial.bin").write_bytes(b"p")
        raise OSError(28, "No space left on device")

    with pytest.raises(WorkbenchError, match="No space left on device.*is as it was"):
        T.write_export(out, half_then_fail, {}, force=True)
    assert {p: (out / p).read_bytes() for p in T.files_under(out)} == before
    _no_staging_left(tmp_path)


def test_a_file_as_target_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(WorkbenchError, match="is a file"):
        T.resolve_target(tmp_path / "f", force=True)


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("fmt", ["adapter", "gemma", "hf"])
def test_export_refuses_a_non_empty_out_and_deletes_nothing(trained_demo_run, capsys, tmp_path, fmt):
    out = tmp_path / "project"
    files = _user_tree(out)
    err = _one_line_error(capsys, ["export", "--in-process", str(trained_demo_run), "--format", fmt,
                                   "--out", str(out)])
    assert "is not empty" in err and "--force" in err
    err = _one_line_error(capsys, ["export", "--in-process", str(trained_demo_run), "--format", fmt,
                                   "--out", str(out), "--force"])
    assert "not an export of gemma-workbench" in err
    _intact(out, files)


@pytest.mark.parametrize("where", [".", "~"])
def test_export_to_the_working_dir_or_home_wipes_nothing(trained_demo_run, capsys, tmp_path,
                                                         monkeypatch, where):
    home = tmp_path / "home"
    files = _user_tree(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    for extra in ([], ["--force"]):
        _one_line_error(capsys, ["export", "--in-process", str(trained_demo_run), "--format", "gemma",
                                 "--out", where, *extra])
    _intact(home, files)


def test_a_forced_hf_reexport_leaves_no_stale_shard_or_index(trained_demo_run, tmp_path, monkeypatch):
    """A sharded export, then a single-file one in the same folder: only the new files remain,
    and a reload reads the new weights (the old index would point a loader at the old shards)."""
    from adapters_lib.export import merged
    from adapters_lib.models.hf import safetensors_io

    out = tmp_path / "hf"
    monkeypatch.setattr(merged, "HF_SHARD_BYTES", 1 << 20)
    tuned.export_run(trained_demo_run, "hf", step=20, out=out)
    first = set(T.files_under(out))
    assert "model.safetensors.index.json" in first and any("-of-" in f for f in first)
    monkeypatch.setattr(merged, "HF_SHARD_BYTES", 5 * 2**30)
    with pytest.raises(WorkbenchError, match="earlier export"):
        tuned.export_run(trained_demo_run, "hf", step=40, out=out)
    result = tuned.export_run(trained_demo_run, "hf", step=40, out=out, force=True)
    assert result["step"] == 40
    assert set(T.files_under(out)) == {"config.json", "model.safetensors", "tokenizer.model",
                                      "gemma_workbench.json", T.MARKER}  # + what it was trained on
    marker = json.loads((out / T.MARKER).read_text())
    assert marker["step"] == 40 and marker["format"] == "hf"
    # The weights are step 40's: they differ from a step-20 export's.
    again = tmp_path / "hf20"
    tuned.export_run(trained_demo_run, "hf", step=20, out=again)
    file40, file20 = out / "model.safetensors", again / "model.safetensors"
    h40, h20 = safetensors_io.read_header(file40), safetensors_io.read_header(file20)
    name = "model.layers.0.self_attn.q_proj.weight"
    import numpy as np

    assert not np.array_equal(safetensors_io.read_tensor(file40, h40, name), safetensors_io.read_tensor(file20, h20, name))
    _no_staging_left(tmp_path)


def test_the_runs_own_default_folder_is_replaced_without_force(trained_demo_run, tmp_path):
    import shutil

    run = tmp_path / "run-copy"
    shutil.copytree(trained_demo_run, run)
    first = tuned.export_run(run, "adapter", step=20)
    assert Path(first["out"]) == run / "adapter"
    second = tuned.export_run(run, "adapter")
    assert second["step"] == 40 and json.loads((run / "adapter" / T.MARKER).read_text())["step"] == 40
    (run / "adapter" / "mine.txt").write_text("keep me")
    with pytest.raises(WorkbenchError, match="mine.txt"):
        tuned.export_run(run, "adapter")
    assert (run / "adapter" / "mine.txt").read_text() == "keep me"
