"""A/B on a trained demo run: the tuned model answers eval prompts the base model fails."""

from __future__ import annotations

import json

import pytest

from workbench.cli import main


@pytest.fixture(scope="module")
def parity_evals():
    from adapters_lib.models import demo_tasks

    _, evals = demo_tasks.demo_splits()
    return [e for e in evals if e["task"] == "parity"][:12]


def test_compare_shows_the_tuned_model_answering_eval_prompts_the_base_fails(
        trained_demo_run, parity_evals, tmp_path, capsys):
    from adapters_lib.evaluate import exact_match_text

    prompts = tmp_path / "evals.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": e["messages"][0]["content"]}) + "\n" for e in parity_evals))
    rc = main(["compare", "--in-process", "--run", str(trained_demo_run), "--prompts", str(prompts), "--json",
               "--max-new-tokens", "8"])
    assert rc == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["prompt"] for r in results] == [e["messages"][0]["content"] for e in parity_evals]
    answers = [e["messages"][1]["content"] for e in parity_evals]
    base = sum(exact_match_text(r["base"], a) for r, a in zip(results, answers, strict=True))
    tuned = sum(exact_match_text(r["tuned"], a) for r, a in zip(results, answers, strict=True))
    assert tuned > base, (base, tuned, results[:3])
    saved = sorted((trained_demo_run / "compare").glob("*.jsonl"))
    assert saved
    records = [json.loads(line) for line in saved[-1].read_text().splitlines()]
    assert [(r["prompt"], r["base"], r["tuned"]) for r in records] == \
        [(r["prompt"], r["base"], r["tuned"]) for r in results]
    assert records[0]["settings"]["max_new_tokens"] == 8 and records[0]["step"] == 40


def test_compare_an_earlier_checkpoint_from_a_text_prompt_file(trained_demo_run, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Is 133 even or odd?\n\nSay the first word: piano river stone\n")
    rc = main(["compare", "--in-process", "--run", str(trained_demo_run), "--step", "20", "--prompts", str(prompts),
               "--max-new-tokens", "8", "--no-save"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("prompt: ") == 2 and out.count("  base : ") == 2 and out.count("  tuned: ") == 2


def test_sample_streams_a_runs_tuned_answer_and_json_gives_one_object(trained_demo_run, capsys):
    rc = main(["sample", "--in-process", "--run", str(trained_demo_run), "--prompt", "Is 133 even or odd?",
               "--max-new-tokens", "8"])
    streamed = capsys.readouterr().out
    assert rc == 0
    rc = main(["sample", "--in-process", "--run", str(trained_demo_run), "--prompt", "Is 133 even or odd?",
               "--max-new-tokens", "8", "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert streamed == obj["text"] + "\n" and obj["step"] == 40 and obj["text"].strip()


def test_a_bad_prompt_file_line_is_named(tmp_path, trained_demo_run, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"question": "no prompt key"}\n')
    rc = main(["compare", "--in-process", "--run", str(trained_demo_run), "--prompts", str(prompts)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"{prompts}:2" in err and len(err.splitlines()) == 1
