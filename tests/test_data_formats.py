"""Readers and formats: every file type and every format becomes the same examples."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fixtures_data import CHAT, QA, jsonl

from adapters_lib.data import check_file, read_path
from adapters_lib.data.formats import to_examples
from adapters_lib.errors import WorkbenchError


def _examples(path, fmt="auto", field_map=None):
    read = read_path(path)
    examples, issues, formats = to_examples(read.records, fmt, field_map)
    return examples, read.issues + issues, formats


def test_qa_jsonl_becomes_user_and_model_turns_citing_lines(write):
    p = write("train.jsonl", jsonl(QA[:3]))
    examples, issues, formats = _examples(p)
    assert issues == [] and formats == {str(p): "qa"}
    assert examples[1].messages == [{"role": "user", "content": "What is 1 plus 1?"},
                                    {"role": "assistant", "content": "2"}]
    assert [str(e.where) for e in examples] == [f"{p}:1", f"{p}:2", f"{p}:3"]


@pytest.mark.parametrize("record, fmt, user, answer", [
    ({"prompt": "P", "response": "R"}, "prompt_response", "P", "R"),
    ({"prompt": "P", "completion": "C"}, "prompt_response", "P", "C"),
    ({"input": "I", "output": "O"}, "prompt_response", "I", "O"),
    ({"instruction": "Do X", "input": "on Y", "output": "Z"}, "alpaca", "Do X\n\non Y", "Z"),
    ({"instruction": "Do X", "input": "", "output": "Z"}, "alpaca", "Do X", "Z"),
    ({"question": "Q", "answer": "A"}, "qa", "Q", "A"),
])
def test_each_format_is_detected_and_converted(write, record, fmt, user, answer):
    examples, issues, formats = _examples(write("d.jsonl", jsonl([record])))
    assert issues == []
    assert list(formats.values()) == [fmt]
    assert examples[0].messages == [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def test_chat_accepts_model_role_and_keeps_system_first(write):
    rec = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                        {"role": "model", "content": "M"}]}
    examples, issues, _ = _examples(write("c.jsonl", jsonl([rec])))
    assert issues == []
    assert [m["role"] for m in examples[0].messages] == ["system", "user", "assistant"]


def test_text_jsonl_and_txt_paragraphs(write):
    examples, _, formats = _examples(write("t.jsonl", jsonl([{"text": "hello"}, {"text": "world"}])))
    assert [e.text for e in examples] == ["hello", "world"] and set(formats.values()) == {"text"}
    p = write("t.txt", "first para\nline two\n\n\nsecond para\n")
    examples, _, _ = _examples(p)
    assert [e.text for e in examples] == ["first para\nline two", "second para"]
    assert [e.where.line for e in examples] == [1, 5]


def test_json_list_records_know_their_line(write):
    text = "[\n" + ",\n".join(json.dumps(r, indent=1) for r in QA[:2]) + "\n]\n"
    p = write("d.json", text)
    examples, issues, _ = _examples(p)
    assert issues == [] and len(examples) == 2
    assert examples[0].where.line == 2
    assert examples[1].where.line == text.splitlines().index("{", 2) + 1


def test_csv_and_parquet_read_like_jsonl(write, tmp_path):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["question", "answer"])
    w.writeheader()
    w.writerows(QA[:3] + [{"question": "multi\nline", "answer": "x"}] + QA[3:4])
    p = write("d.csv", buf.getvalue())
    examples, issues, _ = _examples(p)
    assert issues == [] and len(examples) == 5
    assert [e.where.line for e in examples] == [2, 3, 4, 5, 7]

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(CHAT), tmp_path / "c.parquet")
    examples, issues, formats = _examples(tmp_path / "c.parquet")
    assert issues == [] and list(formats.values()) == ["chat"] and len(examples) == 4
    assert str(examples[2].where) == f"{tmp_path / 'c.parquet'}:row 3"


def test_folder_reads_every_file_and_skips_unknown_ones(write, tmp_path):
    write("d/a.jsonl", jsonl(QA[:2]))
    write("d/sub/b.jsonl", jsonl(CHAT[:1]))
    write("d/notes.md", "# notes")
    write("d/.hidden.jsonl", jsonl(QA))
    write("d/empty.jsonl", "")
    examples, issues, formats = _examples(tmp_path / "d")
    assert len(examples) == 3
    assert sorted(formats.values()) == ["chat", "qa"]
    assert [i.severity for i in issues] == ["warning", "warning"]
    assert sorted(str(i) for i in issues) == [f"{tmp_path / 'd' / 'empty.jsonl'}: file is empty",
                                              f"{tmp_path / 'd' / 'notes.md'}: skipped: .md extension is "
                                              "not one of .jsonl .json .csv .parquet .txt"]


def test_field_map_renames_source_fields(write):
    p = write("d.jsonl", jsonl([{"q": "Q?", "a": "A!"}]))
    examples, issues, formats = _examples(p, "qa", {"question": "q", "answer": "a"})
    assert issues == [] and examples[0].messages[1]["content"] == "A!"
    p = write("s.jsonl", jsonl([{"conversations": [{"from": "human", "value": "hi"},
                                                   {"from": "gpt", "value": "yo"}]}]))
    examples, issues, _ = _examples(p, "chat", {"messages": "conversations", "role": "from", "content": "value"})
    assert issues == [] and examples[0].messages[1] == {"role": "assistant", "content": "yo"}


def test_forced_format_reports_the_missing_field(write):
    p = write("d.jsonl", jsonl([{"question": "Q"}]))
    _, issues, _ = _examples(p, "qa")
    assert [str(i) for i in issues] == [f'{p}:1: missing field "answer"']
    assert issues[0].field == "answer"


def test_unknown_extension_and_missing_path_are_workbench_errors(write, tmp_path):
    with pytest.raises(WorkbenchError, match="unknown data file type"):
        check_file(write("d.xlsx", "x"))
    with pytest.raises(WorkbenchError, match="not found"):
        check_file(tmp_path / "nope.jsonl")


def test_forced_format_on_other_data_says_what_the_record_looks_like(write):
    p = write("d.jsonl", jsonl(CHAT[:1]))
    _, issues, _ = _examples(p, "qa")
    assert str(issues[0]) == (f'{p}:1: missing field "question" (format is qa, but the record looks '
                              "like chat: messages)")
