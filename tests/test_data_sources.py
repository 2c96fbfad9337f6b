"""Dataset sources: hf: and tfds: datasets read from caches the tests fill with the libraries'
own writers; splits, slices, label mapping, streaming with exact resume, missing datasets."""

from __future__ import annotations

import numpy as np
import pytest

from adapters_lib.config import DataSpec
from adapters_lib.errors import WorkbenchError

LABELS = {"0": "negative", "1": "positive"}


def test_hf_cache_dataset_reads_its_splits_and_slices(dataset_env):
    from adapters_lib.data.sources import open_source

    train = open_source("hf:imdb")
    assert (train.num_rows, train.splits, train.label_names) == (40, {"train": 40, "test": 10}, ["neg", "pos"])
    assert sorted(train.columns) == ["label", "text"]
    assert open_source("hf:imdb/plain_text@test").num_rows == 10
    part = open_source("hf:imdb@train[:10%]")
    first = part.read(0, 10)
    assert len(first) == 4 and str(first[0].where) == "hf:imdb@train[:10%]:row 1"
    assert [r.data for r in first] == [r.data for r in train.read(0, 4)]
    tail = open_source("hf:imdb@train[-3:]").read(0, 3)
    assert [r.data for r in tail] == [r.data for r in train.read(37, 40)]
    assert set(first[0].data) == {"text", "label"} and isinstance(first[0].data["label"], int)


def test_hf_saved_to_disk_folder_reads_a_named_split(dataset_env):
    from adapters_lib.data.sources import open_source

    folder = dataset_env["saved"]
    assert open_source(f"hf:{folder}@validation").num_rows == 4
    assert open_source(f"hf:{folder}").num_rows == 12  # train by default
    with pytest.raises(WorkbenchError, match=r"no split 'valid' \(the dataset has train, validation\)") as e:
        open_source(f"hf:{folder}@valid")
    assert "\n" not in str(e.value)


def test_missing_datasets_name_where_they_looked_and_how_to_fetch_them(dataset_env, tmp_path, monkeypatch):
    from adapters_lib.data.sources import open_source

    with pytest.raises(WorkbenchError) as e:
        open_source("hf:stanfordnlp/sst2")
    text = str(e.value)
    assert "\n" not in text and str(dataset_env["cache"] / "stanfordnlp___sst2") in text
    assert "datasets.load_dataset('stanfordnlp/sst2')" in text
    with pytest.raises(WorkbenchError, match="config 'other' of imdb is not in the datasets cache"):
        open_source("hf:imdb/other")
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    with pytest.raises(WorkbenchError) as e:
        open_source("tfds:imdb_reviews@train")
    text = str(e.value)
    assert "\n" not in text and f"looked in {tmp_path / 'imdb_reviews'}" in text
    assert f"tfds build imdb_reviews --data_dir {tmp_path}" in text


def test_tfds_prepared_dataset_reads_splits_slices_and_versions(tfds_dir, monkeypatch):
    from adapters_lib.data.sources import open_source

    monkeypatch.setenv("TFDS_DATA_DIR", str(tfds_dir))
    train = open_source("tfds:imdb_reviews")
    assert (train.num_rows, train.splits, train.label_names) == (40, {"train": 40, "test": 10}, ["neg", "pos"])
    rows = train.read(0, 40)
    assert all(isinstance(r.data["text"], str) and r.data["label"] in (0, 1) for r in rows)
    sliced = open_source("tfds:imdb_reviews/plain_text:1.0.0@train[10:20]").read(0, 100)
    assert [r.data for r in sliced] == [r.data for r in rows[10:20]]
    assert str(sliced[0].where).endswith("@train[10:20]:row 1")
    assert open_source("tfds:imdb_reviews@test[:50%]").num_rows == 5
    with pytest.raises(WorkbenchError, match=r"version 2\.0\.0 is not prepared .*prepared: 1\.0\.0"):
        open_source("tfds:imdb_reviews:2.0.0")


def test_labels_map_to_answer_text_and_an_unknown_label_is_reported(dataset_env, codec):
    from adapters_lib.data import check_file
    from adapters_lib.data.pipeline import build_pipeline

    spec = DataSpec(path="hf:imdb", labels=LABELS, eval_path="hf:imdb@test", streaming=False)
    pipe = build_pipeline(spec, codec, batch_size=2, seed=0)
    assert pipe.report.format == "prompt_response" and not pipe.report.errors
    answers = [ex["messages"][-1]["content"] for ex in pipe.eval_examples]
    assert len(answers) == 10 and set(answers) == {"negative", "positive"}
    by_name = check_file("hf:imdb@test", tokenizer=codec, labels={"neg": "bad", "pos": "good"})
    assert by_name.examples == 10 and not by_name.errors  # ClassLabel names work as keys
    partial = check_file("hf:imdb@test", tokenizer=codec, labels={"0": "negative"})
    assert partial.examples + len(partial.errors) == 10 and partial.errors
    assert "label 1 is not in [data] labels (0 = 'negative')" in str(partial.errors[0])
    assert str(partial.errors[0]).startswith("hf:imdb@test:row ")


def test_classification_runs_score_exact_match_on_every_eval_example():
    from adapters_lib.config import RunConfig
    from adapters_lib.evals.plan import plan_for

    cfg = RunConfig().replace(data=DataSpec(path="tfds:imdb_reviews", labels=LABELS))
    plan = plan_for(cfg)
    assert "exact_match" in plan.metrics and plan.examples > 1000


def test_streaming_batches_are_a_function_of_the_step_and_resume_reads_only_their_blocks(dataset_env, codec):
    from adapters_lib.data.sources import open_source
    from adapters_lib.data.streaming import build_streaming

    spec = DataSpec(path="hf:imdb", labels=LABELS, max_length=192, eval_fraction=0.1, streaming=True)
    source = open_source(spec.path)

    def make():
        return build_streaming(spec, source, codec, batch_size=3, seed=7, block=8)

    run = make()
    assert run.train_rows == 36 and len(run.eval) == 4  # the last 4 rows are held out
    epoch0 = [run.record_of(p) for p in range(36)]
    assert sorted(r for _, r in epoch0) == list(range(36)) and {e for e, _ in epoch0} == {0}
    assert [r for _, r in epoch0] != list(range(36))  # shuffled
    batches = [run.train_batch(s) for s in range(15)]  # past one epoch (12 steps)
    resumed = make()
    assert resumed.record_at(9) == run.record_at(9)
    got = resumed.train_batch(9)
    assert resumed.blocks_read <= 3  # the blocks of step 9's three rows, not the data before
    for key in got:
        np.testing.assert_array_equal(got[key], batches[9][key])
    # each row is its record, tokenized as the whole-dataset pipeline would
    _, row = run.record_at(4)
    record = source.read(row, row + 1)[0].data
    answer = LABELS[str(record["label"])]
    ids = batches[4]["tokens"][0][batches[4]["segment_ids"][0] > 0]
    text = codec.decode(ids.tolist())
    assert record["text"] in text and text.endswith(f"model\n{answer}<end_of_turn>\n")
    assert batches[4]["loss_mask"].sum() > 0 and batches[12]["loss_mask"].sum() > 0


def test_config_takes_dataset_refs_as_they_are_and_resolves_a_saved_folder(tmp_path):
    from adapters_lib.config import load_config

    p = tmp_path / "run.toml"
    p.write_text('[data]\npath = "tfds:imdb_reviews:1.0.0@train[:10%]"\neval_path = "hf:saved@test"\n'
                 'labels = {0 = "negative", 1 = "positive"}\nstreaming = true\n')
    data = load_config(p).data
    assert data.path == "tfds:imdb_reviews:1.0.0@train[:10%]" and data.eval_path == "hf:saved@test"
    assert data.labels == LABELS and data.streaming is True
    p.write_text('[data]\npath = "hf:./saved@train[:50%]"\n')
    assert load_config(p).data.path == f"hf:{tmp_path / 'saved'}@train[:50%]"
    p.write_text('[data]\npath = "hf:imdb@train[:10%"\n')
    with pytest.raises(WorkbenchError, match="not a split name"):
        load_config(p)


def test_data_list_shows_the_caches_and_the_files_with_splits_rows_and_formats(
        dataset_env, tfds_dir, tmp_path, monkeypatch, capsys):
    import json

    from workbench.cli import main

    monkeypatch.setenv("TFDS_DATA_DIR", str(tfds_dir))
    folder = tmp_path / "mine"
    (folder / "deep").mkdir(parents=True)
    (folder / "qa.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n' * 3)
    (folder / "deep" / "notes.txt").write_text("one\n\ntwo\n")
    assert main(["data", "list", str(folder), "--json"]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)["datasets"]}
    hf = entries["hf:imdb"]
    assert (hf["splits"], hf["rows"], hf["format"], hf["labels"]) == (
        {"train": 40, "test": 10}, 50, "text", ["neg", "pos"])
    assert hf["bytes"] > 0 and hf["location"].startswith(str(dataset_env["cache"]))
    tf = entries["tfds:imdb_reviews/plain_text"]
    assert (tf["splits"], tf["rows"], tf["format"], tf["labels"]) == (
        {"train": 40, "test": 10}, 50, "text", ["neg", "pos"])
    qa = entries[str(folder / "qa.jsonl")]
    assert (qa["kind"], qa["rows"], qa["format"], qa["columns"]) == ("file", 3, "qa", ["answer", "question"])
    assert entries[str(folder / "deep" / "notes.txt")]["rows"] == 2
    assert main(["data", "list", str(folder)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "SPLITS", "ROWS", "BYTES", "FORMAT"]
    assert any(line.startswith("tfds:imdb_reviews/plain_text") and "train 40, test 10" in line
               and line.endswith("text (labels neg/pos)") for line in table)
