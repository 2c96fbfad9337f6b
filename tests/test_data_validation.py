"""The validation report: every bad case gives a clear message citing file:line and the field."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fixtures_data import CHAT, QA, jsonl

from adapters_lib.config import DataSpec
from adapters_lib.data import build_pipeline, check_file
from adapters_lib.errors import WorkbenchError
from workbench.cli import main


def test_bad_role_cites_file_line_and_field(write, codec):
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "yo"}]}
    p = write("train.jsonl", jsonl(CHAT[:2] + [bad] + CHAT[2:]))
    report = check_file(p, tokenizer=codec)
    assert [str(e) for e in report.errors] == [
        f'{p}:3: messages[1].role is "bot"; expected user, assistant or system']
    assert report.errors[0].field == "messages[1].role"
    assert (report.records, report.examples, report.dropped) == (5, 4, 1) and report.ok


@pytest.mark.parametrize("record, needle", [
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0].role is assistant; expected user"),
    ({"messages": [{"role": "user", "content": "x"}]}, "no assistant turn"),
    ({"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "y"}]},
     "messages[0].content is empty"),
    ({"messages": "hello"}, "messages is a str; expected a list"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]},
     "a system message may only come first"),
])
def test_chat_structure_errors_name_the_field(write, codec, record, needle):
    p = write("c.jsonl", jsonl(CHAT[:1] + [record]))
    report = check_file(p, tokenizer=codec)
    assert len(report.errors) == 1 and str(report.errors[0]).startswith(f"{p}:2: ")
    assert needle in report.errors[0].message


def test_empty_file_is_fatal_with_a_clear_message(write, codec):
    p = write("train.jsonl", "\n  \n")
    report = check_file(p, tokenizer=codec)
    assert report.fatal == f"{p} is empty: no records"
    with pytest.raises(WorkbenchError, match="is empty"):
        build_pipeline(DataSpec(path=str(p)), codec, batch_size=2, seed=0)


def test_non_utf8_line_is_dropped_and_the_rest_kept(write, codec):
    lines = [json.dumps(r).encode() for r in QA[:3]]
    lines[1] = lines[1].replace(b"1 plus", b"\xff plus")
    p = write("train.jsonl", b"\n".join(lines) + b"\n")
    report = check_file(p, tokenizer=codec)
    assert report.examples == 2
    assert [str(e) for e in report.errors] == [
        f"{p}:2: not UTF-8: byte 0xff at column 23; record skipped (save the file as UTF-8)"]


def test_non_utf8_in_csv_is_replaced_and_warned(write, codec):
    p = write("d.csv", b"question,answer\nwhat \xe9?,yes\nok?,no\n")
    report = check_file(p, tokenizer=codec)
    assert report.examples == 2 and report.errors == []
    assert str(report.warnings[0]).startswith(f"{p}:2: not UTF-8")


def test_ten_megabyte_line_is_skipped_with_its_size(write, codec):
    huge = json.dumps({"question": "x" * 10_000_000, "answer": "y"})
    p = write("train.jsonl", jsonl(QA[:2]) + huge + "\n" + jsonl(QA[2:3]))
    report = check_file(p, tokenizer=codec)
    assert report.examples == 3
    assert [str(e) for e in report.errors] == [
        f"{p}:3: record is 10.0 MB, longer than the 4 MB limit for one record; skipped"]


def test_ten_megabyte_csv_cell_stops_reading_at_its_line(write, codec):
    p = write("d.csv", "question,answer\nq1,a1\nq2," + "x" * 10_000_000 + "\nq3,a3\n")
    report = check_file(p, tokenizer=codec)
    assert report.examples == 1
    assert str(report.errors[0]).startswith(f"{p}:3: a cell is over the 4 MB limit for one record")


def test_mixed_formats_keep_the_majority_and_name_the_others(write, codec):
    p = write("train.jsonl", jsonl(QA[:5] + CHAT[:1] + [{"foo": 1}]))
    report = check_file(p, tokenizer=codec)
    assert report.format == "qa" and report.examples == 5
    lines = {e.where.line: e.message for e in report.errors}
    assert "record looks like chat" in lines[6] and "mixed formats" in lines[6]
    assert "detected from 5 of 7 records" in lines[6]
    assert "no known format: fields foo" in lines[7]


def test_invalid_json_line_is_reported_with_column(write, codec):
    p = write("train.jsonl", jsonl(QA[:1]) + '{"question": "a" "answer": "b"}\n[1, 2]\n')
    report = check_file(p, tokenizer=codec)
    assert [e.where.line for e in report.errors] == [2, 3]
    assert "invalid JSON: Expecting ',' delimiter at column 18" in report.errors[0].message
    assert "record is a JSON list; expected an object" in report.errors[1].message


def test_all_dropped_is_fatal_and_the_pipeline_says_why(write, codec):
    p = write("train.jsonl", jsonl([{"question": "", "answer": "1"}, {"question": "q", "answer": " "}]))
    report = check_file(p, tokenizer=codec)
    assert report.fatal == "all 2 records were dropped; nothing to train on"
    with pytest.raises(WorkbenchError) as err:
        build_pipeline(DataSpec(path=str(p), eval_fraction=0.0), codec, batch_size=2, seed=0)
    assert f"first problem: {p}:1: question is empty" in str(err.value)


def test_unknown_format_file_is_fatal(write, codec):
    p = write("train.jsonl", jsonl([{"a": 1}, {"b": 2}]))
    report = check_file(p, tokenizer=codec)
    assert report.fatal and "no known format: records have fields a" in str(report.errors[0])


def test_report_counts_tokens_truncation_and_histogram(write, codec):
    long = {"question": "q?", "answer": "apple " * 100}
    p = write("train.jsonl", jsonl(QA[:9] + [long]))
    report = check_file(p, tokenizer=codec, max_length=64)
    d = report.to_dict()
    assert (d["records"], d["examples"], d["truncated"]) == (10, 10, 1)
    assert d["truncated_fraction"] == 0.1 and d["warnings"] == []
    many = check_file(write("long.jsonl", jsonl(QA[:3] + [long] * 2)), tokenizer=codec, max_length=64)
    assert "40% of examples are longer than max_length 64" in many.warnings[-1].message
    assert sum(h["count"] for h in d["histogram"]) == 10
    assert d["histogram"][-1]["count"] == 1 and d["histogram"][-1]["lo"] > 64
    assert d["tokens"] == sum(min(n, 64) for n in report.lengths)
    preview = report.preview(2)
    assert preview[0]["text"].startswith("<bos><start_of_turn>user\nWhat is 0 plus 0?")
    assert [s for s in preview[0]["segments"] if s[1]] == [["0", True], ["<end_of_turn>", True]]


def test_cli_data_check_json_reports_counts_and_error_lines(write, capsys):
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "yo"}]}
    p = write("train.jsonl", jsonl(CHAT[:3] + [bad]))
    assert main(["data", "check", str(p), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["records"], out["examples"], out["dropped"], out["format"]) == (4, 3, 1, "chat")
    assert [(e["line"], e["field"]) for e in out["errors"]] == [(4, "messages[1].role")]
    assert out["errors"][0]["text"] == f'{p}:4: messages[1].role is "bot"; expected user, assistant or system'
    assert out["histogram"] and out["ok"] is True and out["preview"] == []
    assert main(["data", "check", str(p), "--json", "--preview", "2"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [x["where"] for x in out["preview"]] == [f"{p}:1", f"{p}:2"]


def test_cli_data_check_text_and_fatal_exit_codes(write, capsys, tmp_path):
    p = write("train.jsonl", jsonl(QA[:4]))
    assert main(["data", "check", str(p), "--input-format", "qa"]) == 0
    assert "format qa, 4 records → 4 examples (0 dropped)" in capsys.readouterr().out
    assert main(["data", "check", str(p), "--format", "qa"]) == 0  # the older spelling
    out = capsys.readouterr()
    assert "format qa, 4 records" in out.out and "note: --format is now --input-format" in out.err
    assert main(["data", "check", str(tmp_path / "missing.jsonl"), "--json"]) == 2
    assert "not found" in json.loads(capsys.readouterr().out)["fatal"]
    assert main(["data", "check", str(tmp_path / "missing.jsonl")]) == 2
    assert "error:" in capsys.readouterr().err
    empty = write("empty.jsonl", "")
    assert main(["data", "check", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().out


def test_eval_path_gives_the_eval_split(write, codec):
    train, evals = write("train.jsonl", jsonl(QA[:8])), write("eval.jsonl", jsonl(QA[8:]))
    spec = dataclasses.replace(DataSpec(), path=str(train), eval_path=str(evals))
    pipe = build_pipeline(spec, codec, batch_size=2, seed=0)
    assert len(pipe.eval_examples) == 4 and pipe.eval_examples[0]["messages"][1]["content"] == "16"
    assert pipe.report.split["train_examples"] == 8


def test_check_spec_previews_the_demo_data_like_the_pipeline(codec):
    from adapters_lib.data import check_spec

    report = check_spec(DataSpec(max_length=64), codec)
    assert report.ok and report.format == "chat" and report.examples == report.records > 3000
    assert report.preview(1)[0]["where"] == "demo:train:1"
    pipe = build_pipeline(DataSpec(max_length=64), codec, batch_size=2, seed=0)
    assert pipe.report.tokens == report.tokens
