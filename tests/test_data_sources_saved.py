"""Folders that ``datasets``' ``save_to_disk`` wrote, named as they are (``FOLDER[@SPLIT]``):
read by ``data check``, ``data list``, ``[data] path``, ``eval --data`` and DPO pairs, with the
splits and slices ``hf:`` takes; every broken one is one line on stderr that says what to do.
The folders are written by ``datasets`` itself (``fixtures_datasets.saved_datasets``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from adapters_lib.config import DataSpec
from adapters_lib.errors import WorkbenchError
from workbench.cli import main

QA = {"prompt": "question", "response": "answer"}
FIELDS = ["--field", "prompt=question", "--field", "response=answer"]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_data_check_reads_a_saved_dataset_folder_with_a_field_map(saved_datasets, capsys):
    """The issue's case: ``data check FOLDER --field … --json`` on a ``Dataset.save_to_disk`` folder."""
    folder = str(saved_datasets["single"])
    assert main(["data", "check", folder, *FIELDS, "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["ok"], report["format"], report["records"], report["examples"]) == (True, "qa", 30, 30)
    assert report["files"] == [folder] and err == ""


def test_saved_dataset_dicts_read_their_splits_and_slices(saved_datasets):
    from adapters_lib.data.sources import open_source

    folder = saved_datasets["dict"]
    train = open_source(str(folder))  # train by default, as for hf:
    assert (train.num_rows, train.splits, train.columns) == (30, {"train": 30, "test": 10}, ["question", "answer"])
    tenth = open_source(f"{folder}@train[:10%]").read(0, 100)
    assert [r.data for r in tenth] == [r.data for r in train.read(0, 3)]
    part = open_source(f"{folder}@test[5:20]").read(0, 100)  # clipped to the split, as datasets does
    assert [r.data["answer"] for r in part] == ["106", "107", "108", "109", "110"]
    assert str(part[0].where) == f"{folder}@test[5:20]:row 1"
    assert open_source(folder).num_rows == 30  # a Path is a data path too
    assert open_source(f"hf:{folder}@test[-2:]").num_rows == 2  # the hf: spelling reads the same
    only = open_source(str(saved_datasets["test_only"]))  # a Dataset keeps the split it was loaded as
    assert (only.splits, only.num_rows) == ({"test": 5}, 5)
    assert open_source(f"{saved_datasets['no_train']}@validation[:50%]").num_rows == 3


def _damage(saved: dict[str, Path], tmp_path: Path, name: str, how: str) -> str:
    folder = tmp_path / name
    shutil.copytree(saved[name], folder)
    shard = next(folder.rglob("data-00000-of-*.arrow"))
    if how == "no shard":
        shard.unlink()
    elif how == "cut shard":
        shard.write_bytes(shard.read_bytes()[:200])
    elif how == "state not JSON":
        (folder / "state.json").write_text("{")
    elif how == "state a list":
        (folder / "state.json").write_text("[]")
    elif how == "no split folder":
        shutil.rmtree(folder / "test")
    elif how == "odd split name":
        (folder / "dataset_dict.json").write_text('{"splits": ["train", "../single"]}')
    return str(folder)


BROKEN = [  # (id, saved folder, damage, split suffix, extra argv, needle)
    ("several splits, no train", "no_train", "", "", [],
     "which split? (no train split; the dataset has validation, test); add @validation"),
    ("a split it lacks", "dict", "", "@valid", [], "no split 'valid' (the dataset has train, test); use @train"),
    ("a slice past its end", "dict", "", "@test[50:]", [], "the slice selects no rows (split 'test' has 10)"),
    ("a bad slice", "dict", "", "@test[:x]", [], "bad slice"),
    ("a field map naming no column", "dict", "", "", ["--field", "prompt=question", "--field", "response=answr"],
     "the field map response=answr names a column the dataset does not have (its columns: question, answer)"),
    ("a shard missing", "single", "no shard", "", [], "is incomplete: "),
    ("a shard cut short", "single", "cut shard", "", [], "cannot be read (a cut or damaged Arrow shard"),
    ("state.json not JSON", "single", "state not JSON", "", [], "state.json is not valid JSON"),
    ("state.json a list", "single", "state a list", "", [], "state.json is not a datasets state file"),
    ("a split folder missing", "dict", "no split folder", "@test", [],
     "split 'test' is listed in dataset_dict.json but its folder"),
    ("a split name that is a path", "dict", "odd split name", "", [], "lists '../single', not a split name"),
]


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("name, how, split, extra, needle", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_a_broken_saved_dataset_is_one_line_on_stderr_that_says_what_to_do(
        saved_datasets, tmp_path, capsys, name, how, split, extra, needle, json_flag):
    folder = _damage(saved_datasets, tmp_path, name, how) if how else str(saved_datasets[name])
    assert main(["data", "check", folder + split, *(extra or FIELDS), *json_flag]) == 2
    out, err = capsys.readouterr()
    line = _one_error_line(err)
    assert needle in line and "; " in line  # what, then what to do
    if json_flag:
        assert needle in json.loads(out)["fatal"]


def test_no_unusable_data_check_is_silent_on_stderr(write, capsys):
    """--json kept the verdict on stdout only: a script reading stderr saw nothing (exit 2)."""
    bad = write("bad.jsonl", '{"nothing": "useful"}\n')
    assert main(["data", "check", str(bad), "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is False
    assert "all 1 records were dropped" in _one_error_line(err)
    assert main(["data", "check", str(bad.parent / "missing.jsonl"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert "not found" in json.loads(out)["fatal"] and "not found" in _one_error_line(err)


def test_run_configs_take_a_saved_folder_with_a_split_and_train_on_it(saved_datasets, tmp_path, codec):
    from adapters_lib.config import load_config
    from adapters_lib.data.pipeline import build_pipeline

    link = tmp_path / "mydata"
    link.symlink_to(saved_datasets["dict"], target_is_directory=True)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\npath = "mydata@train[:50%]"\neval_path = "mydata@test[:4]"\n'
                   'field_map = {prompt = "question", response = "answer"}\n')
    data = load_config(cfg).data
    assert data.path == f"{link}@train[:50%]" and data.eval_path == f"{link}@test[:4]"
    pipe = build_pipeline(data, codec, batch_size=2, seed=0)
    assert pipe.report.format == "qa" and pipe.report.split["train_examples"] == 15
    assert len(pipe.eval_examples) == 4 and pipe.eval_examples[0]["messages"][-1]["content"] == "101"
    wrong = DataSpec(path=f"{link}@train", field_map={"prompt": "q"})
    with pytest.raises(WorkbenchError, match=r"field map prompt=q names a column .*question, answer"):
        build_pipeline(wrong, codec, batch_size=2, seed=0)


def test_dpo_pairs_read_from_a_saved_folder(saved_datasets, codec):
    from adapters_lib.data.pipeline import build_pipeline

    spec = DataSpec(path=f"{saved_datasets['pairs']}@train[:10]", eval_path=f"{saved_datasets['pairs']}@train[10:]")
    pipe = build_pipeline(spec, codec, batch_size=2, seed=0, kind="pairs")
    assert pipe.report.format == "preference" and pipe.report.examples == 10
    assert len(pipe.eval) == 2


def test_eval_takes_a_saved_split_as_its_data(saved_datasets, codec):
    from adapters_lib.evals import perplexity

    data = f"{saved_datasets['dict']}@test[:4]"
    pipe = perplexity.tokenize_file(data, codec, max_length=128, field_map=QA)  # what eval --data scores
    assert pipe.report.format == "qa" and len(pipe.train) == 4
    with pytest.raises(WorkbenchError) as e:  # the data is accepted: the model is what is missing
        perplexity.evaluate(model="no-such-model", data=data)
    assert "--data" not in str(e.value) and "no-such-model" in str(e.value)


def test_data_list_shows_saved_folders_by_their_metadata(saved_datasets, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copytree(saved_datasets["dict"], mine / "dict")
    _damage(saved_datasets, mine, "single", "cut shard")
    (mine / "qa.jsonl").write_text(json.dumps(QA) + "\n")
    assert main(["data", "list", str(mine), "--json"]) == 0
    entries = {Path(e["name"]).name: e for e in json.loads(capsys.readouterr().out)["datasets"]
               if e["name"].startswith(str(mine))}
    assert sorted(entries) == ["dict", "qa.jsonl", "single"]  # no state.json, no dataset_info.json
    d = entries["dict"]
    assert (d["kind"], d["splits"], d["rows"], d["format"], d["columns"], d["problem"]) == (
        "saved", {"train": 30, "test": 10}, 40, "qa", ["question", "answer"], None)
    broken = entries["single"]
    assert broken["format"] == "damaged" and "Arrow shard is missing or cut" in broken["problem"]


def test_a_folder_of_files_skips_a_saved_dataset_inside_it_by_name(saved_datasets, tmp_path, codec):
    from adapters_lib.data import check_file

    shutil.copytree(saved_datasets["single"], tmp_path / "saved")
    (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    (tmp_path / "notes").mkdir()  # a lone state.json among data files is not a saved dataset
    (tmp_path / "notes" / "state.json").write_text('{"step": 3}')
    report = check_file(str(tmp_path), tokenizer=codec)
    assert report.examples == 1 and [str(e.where) for e in report.errors] == [f"{tmp_path}/notes/state.json:1"]
    assert any("save_to_disk wrote; name it alone" in w.message and w.where.file == str(tmp_path / "saved")
               for w in report.warnings)


def test_a_folder_of_saved_datasets_alone_says_which_to_name(saved_datasets, tmp_path, capsys):
    """A tired user names the folder above their saved datasets: one line naming one to pass
    (a DatasetDict's split folders count as that dataset, not as more of them)."""
    shutil.copytree(saved_datasets["dict"], tmp_path / "both" / "dict")
    shutil.copytree(saved_datasets["single"], tmp_path / "both" / "single")
    assert main(["data", "check", str(tmp_path / "both"), *FIELDS]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"name one of the 2 saved datasets in it (e.g. [data] path = '{tmp_path}/both/dict')" in line
    shutil.copytree(saved_datasets["single"], tmp_path / "one" / "single")
    assert main(["data", "check", str(tmp_path / "one")]) == 2
    assert f"name the saved dataset in it ([data] path = '{tmp_path}/one/single')" in _one_error_line(
        capsys.readouterr().err)
