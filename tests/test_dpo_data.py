"""DPO's preference data: pairs from every layout and every source the readers take
(JSONL, CSV, Parquet, a folder, the HF datasets cache, a saved folder, a prepared TFDS dataset),
in the model family's chat template; a bad record is dropped with where it is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adapters_lib.config import DataSpec


def _write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


USER = {"role": "user", "content": "Name a color."}
PREFERENCE_ROWS = [
    {"prompt": "What is 2+2?", "chosen": "4", "rejected": "After careful thought: four."},  # TRL strings
    {"prompt": [USER], "chosen": [{"role": "assistant", "content": "Red"}],  # TRL conversational
     "rejected": [{"role": "assistant", "content": "A color I can name is red."}]},
    {"chosen": [USER, {"role": "assistant", "content": "Blue"}],  # chat lists, the prompt implicit
     "rejected": [USER, {"role": "model", "content": "Blue is a color."}], "system": "Be brief."},
    {"prompt": "Same?", "chosen": "yes", "rejected": " yes"},  # line 4: identical answers
    {"prompt": "Missing", "chosen": "yes"},  # line 5: no rejected
    {"chosen": [USER, {"role": "assistant", "content": "Red"}],  # line 6: prompts differ
     "rejected": [{"role": "user", "content": "Other?"}, {"role": "assistant", "content": "No"}]},
    {"prompt": "Hi", "chosen": [{"role": "user", "content": "x"}], "rejected": "b"},  # line 7: no answer
]


def test_preference_records_of_every_layout_become_pairs_and_bad_ones_are_dropped_with_file_line(tmp_path):
    from adapters_lib.data import build_pipeline, check_file

    path = _write(tmp_path / "prefs.jsonl", PREFERENCE_ROWS)
    report = check_file(path, max_length=64)
    assert report.pairs["pairs"] == 3 and report.pairs["dropped"] == 4
    errors = {i.where.line: i.message for i in report.errors}
    assert set(errors) == {4, 5, 6, 7}
    assert "the same" in errors[4] and 'missing field "rejected"' in errors[5]
    assert "differ before their answers" in errors[6] and "does not end with an assistant" in errors[7]
    text = report.render()
    assert "preference pairs: 3 (4 dropped)" in text and f"{path}:4:" in text
    assert report.to_dict()["pairs"]["chosen_tokens"]["max"] >= 2

    pipe = build_pipeline(DataSpec(path=path, max_length=64, eval_fraction=0.0), None, batch_size=2, seed=0,
                          kind="pairs")
    batch = pipe.train_batch(0)
    assert batch["chosen_tokens"].shape == batch["rejected_loss_mask"].shape == (2, 64)
    np.testing.assert_array_equal(pipe.train_batch(0)["chosen_tokens"], batch["chosen_tokens"])  # pure
    for row in range(2):  # the loss is on the answer only: after the prompt, the same in both
        c, r = batch["chosen_loss_mask"][row], batch["rejected_loss_mask"][row]
        first_c, first_r = int(np.argmax(c)), int(np.argmax(r))
        assert first_c == first_r > 5 and c.sum() >= 2 and r.sum() > c.sum() - 10
        np.testing.assert_array_equal(batch["chosen_tokens"][row, :first_c + 1],
                                      batch["rejected_tokens"][row, :first_r + 1])
    with pytest.raises(Exception, match="no preference pairs"):
        build_pipeline(DataSpec(path=_write(tmp_path / "sft.jsonl", [{"prompt": "a", "response": "b"}] * 3),
                                max_length=64), None, batch_size=2, seed=0, kind="pairs")


def test_a_pairs_scored_tokens_are_its_answer_and_the_end_of_turn_marker_only(tmp_path):
    """Issue 41: the log-prob DPO sums for each side is over exactly its answer's tokens and
    the end-of-turn marker after them: no prompt or template token, no padding, nothing after
    the marker. The marker is what a short chosen answer teaches (stop here), so it must be
    scored on the chosen side, as it is on the rejected side after its long answer."""
    from adapters_lib.data import TokenCodec, build_pipeline
    from adapters_lib.models import demo

    tokenizer = str(demo.ensure_demo_tokenizer())
    codec = TokenCodec.from_any(tokenizer)
    answers = {"chosen": ["Red.", "Four."], "rejected": ["Well, a color that I can name for you is red, I think.",
                                                         "Let me think about it carefully: two and two make four."]}
    rows = [{"prompt": p, "chosen": c, "rejected": r}
            for p, c, r in zip(["Name a color.", "What is 2+2?"], answers["chosen"], answers["rejected"], strict=True)]
    pipe = build_pipeline(DataSpec(path=_write(tmp_path / "prefs.jsonl", rows), max_length=48, eval_fraction=0.0),
                          tokenizer, batch_size=2, seed=0, kind="pairs")
    batch = pipe.train_batch(0)
    for side in ("chosen", "rejected"):
        mask, targets = batch[f"{side}_loss_mask"] > 0, batch[f"{side}_targets"]
        scored = sorted(codec.sp.decode([int(t) for t in targets[r][mask[r]]]) for r in range(2))
        assert scored == sorted(f"{a}<end_of_turn>" for a in answers[side]), scored
        for r in range(2):
            last = int(np.flatnonzero(mask[r])[-1])
            assert codec.sp.id_to_piece(int(targets[r, last])) == "<end_of_turn>"
            assert not mask[r, last + 1:].any() and mask[r].sum() == np.ptp(np.flatnonzero(mask[r])) + 1
        assert not (mask & (batch[f"{side}_segment_ids"] == 0)).any()  # padding is never scored


def test_preference_pairs_are_written_in_the_model_familys_chat_template(gemma4_tokenizer, tmp_path):
    """A pair's prompt takes the family's template from its tokenizer: Gemma 3's folds
    the system string into the user turn, Gemma 4's (``<|turn>``, a real system turn) gives
    it its own turn; the answer is the model turn after it either way."""
    from adapters_lib.data import TokenCodec, build_pipeline
    from adapters_lib.models import demo

    data = _write(tmp_path / "prefs.jsonl", PREFERENCE_ROWS[:3])

    def chosen_row(tokenizer) -> str:
        codec = TokenCodec.from_any(tokenizer)
        pipe = build_pipeline(DataSpec(path=data, max_length=64, eval_fraction=0.0), tokenizer, batch_size=3,
                              seed=0, kind="pairs")
        rows = [codec.sp.decode([int(i) for i in row if i != codec.pad]) for row in pipe.train_batch(0)["chosen_tokens"]]
        (row,) = [r for r in rows if "Be brief." in r]
        return row

    gemma3 = chosen_row(str(demo.ensure_demo_tokenizer()))
    assert "<start_of_turn>user\nBe brief.\n\nName a color.<end_of_turn>" in gemma3, gemma3
    assert gemma3.endswith("<start_of_turn>model\nBlue<end_of_turn>\n") and "<|turn>" not in gemma3, gemma3
    gemma4 = chosen_row(gemma4_tokenizer)
    assert "<|turn>system\nBe brief.<turn|>" in gemma4 and "<start_of_turn>" not in gemma4, gemma4
    assert gemma4.count("<|turn>") == 3 and gemma4.endswith("<|turn>model\nBlue<turn|>\n"), gemma4


def test_preference_pairs_read_from_csv_parquet_and_a_folder_as_from_jsonl(tmp_path):
    """Every file source the readers take: TRL's flat layout in CSV and Parquet (chat
    lists too in Parquet), and a folder of JSONL files; a bad record is dropped with its
    file:line (CSV's line counts the header)."""
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    from adapters_lib.data import check_file

    flat = [r for r in PREFERENCE_ROWS if all(isinstance(v, str) for v in r.values())]  # rows 1, 4 and 5
    assert [r["prompt"] for r in flat] == ["What is 2+2?", "Same?", "Missing"]
    with open(tmp_path / "prefs.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "chosen", "rejected"])
        writer.writeheader()
        writer.writerows([flat[0], flat[1], {**flat[0], "prompt": "What is 3+3?"}])
    report = check_file(str(tmp_path / "prefs.csv"), max_length=64)
    assert report.pairs["pairs"] == 2 and report.pairs["dropped"] == 1, report.render()
    assert [(i.where.line, "the same" in i.message) for i in report.errors] == [(3, True)]

    chat = PREFERENCE_ROWS[2]  # chat lists with a system string, the prompt implicit
    pq.write_table(pa.Table.from_pylist([chat, {**chat, "system": "Be terse."}]), tmp_path / "prefs.parquet")
    report = check_file(str(tmp_path / "prefs.parquet"), max_length=64)
    assert report.pairs["pairs"] == 2 and report.pairs["dropped"] == 0, report.render()

    folder = tmp_path / "folder"
    folder.mkdir()
    _write(folder / "a.jsonl", PREFERENCE_ROWS[:3])
    _write(folder / "b.jsonl", PREFERENCE_ROWS[3:])
    report = check_file(str(folder), max_length=64)
    assert report.pairs["pairs"] == 3 and report.pairs["dropped"] == 4, report.render()
    assert {(Path(i.where.file).name, i.where.line) for i in report.errors} == {("b.jsonl", n) for n in (1, 2, 3, 4)}


def test_preference_data_reads_from_the_hf_datasets_cache_and_a_saved_folder(tmp_path, monkeypatch):
    """Preference pairs through the ``hf:`` source, written by ``datasets``' own writers: TRL's
    string layout in the cache layout ``load_dataset`` leaves, chat lists in a
    ``save_to_disk`` folder; a bad record is dropped with its row."""
    import datasets
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.json.json import Json, JsonConfig

    from adapters_lib.data import build_pipeline, check_file

    words = ("red", "blue", "green", "cat", "dog", "sun")
    trl = [{"prompt": f"Say {w}.", "chosen": f"{w}.", "rejected": f"The word you asked me for is {w}."}
           for w in words] + [{"prompt": "Same?", "chosen": "yes", "rejected": "yes"}]  # row 7: dropped
    _write(tmp_path / "train.jsonl", trl)
    files = DataFilesDict.from_patterns({"train": ["train.jsonl"]}, base_path=str(tmp_path))
    features = datasets.Features({k: datasets.Value("string") for k in ("prompt", "chosen", "rejected")})

    class Prefs(Json):  # what load_dataset("prefs") builds, from local files
        BUILDER_CONFIGS = [JsonConfig(name="default", data_files=files, features=features)]

    cache = tmp_path / "cache"
    Prefs(cache_dir=str(cache), dataset_name="prefs", config_name="default", hash="33").download_and_prepare()
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    report = check_file("hf:prefs@train", max_length=64)
    assert report.pairs["pairs"] == 6 and report.pairs["dropped"] == 1
    assert [str(i.where) for i in report.errors] == ["hf:prefs@train:row 7"]
    batch = build_pipeline(DataSpec(path="hf:prefs@train", max_length=64, eval_fraction=0.0), None,
                           batch_size=2, seed=0, kind="pairs").train_batch(0)
    assert batch["chosen_tokens"].shape == batch["rejected_tokens"].shape == (2, 64)
    assert batch["rejected_loss_mask"].sum() > batch["chosen_loss_mask"].sum()  # the long answers

    user = {"role": "user", "content": "Name a color."}
    chat = [{"chosen": [user, {"role": "assistant", "content": w}],
             "rejected": [user, {"role": "assistant", "content": f"A color I can name is {w}."}]}
            for w in ("red", "blue", "green", "pink")]
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(chat)}).save_to_disk(str(saved))
    report = check_file(f"hf:{saved}", max_length=64)
    assert report.pairs["pairs"] == 4 and report.pairs["dropped"] == 0 and report.format == "preference"


def test_preference_data_reads_from_a_prepared_tfds_dataset(tmp_path, monkeypatch):
    """Preference pairs through the ``tfds:`` source: a dataset prepared by TensorFlow
    Datasets' own builder (TRL's string layout as ``Text`` features); a bad record is dropped
    with its row, the splits and slices read as for SFT data."""
    import tensorflow_datasets as tfds

    from adapters_lib.data import build_pipeline, check_file

    words = ("red", "blue", "green", "cat", "dog", "sun", "moon", "tree")
    rows = [{"prompt": f"Say {w}.", "chosen": f"{w}.", "rejected": f"The word you asked me for is {w}."}
            for w in words] + [{"prompt": "Same?", "chosen": "yes", "rejected": "yes"}]  # row 9: dropped

    class Prefs(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        name = "prefs_like"
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            text = tfds.features.Text()
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"prompt": text, "chosen": text, "rejected": text}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(rows), "test": self._generate_examples(rows[:4])}

        def _generate_examples(self, records):
            yield from enumerate(records)

    Prefs(data_dir=str(tmp_path)).download_and_prepare()
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    report = check_file("tfds:prefs_like@train", max_length=64)
    assert report.format == "preference" and report.pairs["pairs"] == 8, report.render()
    assert report.pairs["dropped"] == 1 and len(report.errors) == 1
    assert "tfds:prefs_like@train" in str(report.errors[0].where) and "the same" in report.errors[0].message
    test = check_file("tfds:prefs_like@test", max_length=64).pairs
    assert (test["pairs"], test["dropped"]) == (4, 0)
    assert check_file("tfds:prefs_like@train[:3]", max_length=64).pairs["pairs"] == 3
    batch = build_pipeline(DataSpec(path="tfds:prefs_like@train", max_length=64, eval_fraction=0.0), None,
                           batch_size=2, seed=0, kind="pairs").train_batch(0)
    assert batch["chosen_tokens"].shape == batch["rejected_tokens"].shape == (2, 64)
    assert batch["rejected_loss_mask"].sum() > batch["chosen_loss_mask"].sum()  # the long answers
