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
    for r in results:  # each side's figures, as `compare` of one prompt reports them
        for side in ("base", "tuned"):
            n, reason = r["tokens"][side], r["stop_reason"][side]
            assert 1 <= n <= 8, (side, r)
            assert reason == "stop" if n < 8 else reason in ("stop", "length"), (side, r)
            assert r["tokens_per_s"][side] >= 0 and r["first_token_s"][side] > 0
            assert r["quantize"][side] == "none" and r["dtype"][side]
    assert [r["tokens"] for r in records] == [r["tokens"] for r in results]


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


def test_saved_compares_are_read_newest_first_skipping_what_is_not_a_record(tmp_path):
    from adapters_lib.sample.compare_sets import saved_compares

    folder = tmp_path / "compare"
    folder.mkdir()
    (folder / "20260101-120000.jsonl").write_text(
        '{"prompt": "a", "base": "x", "tuned": "y"}\n', encoding="utf-8")
    (folder / "20260102-120000.jsonl").write_text(
        '{"prompt": "b", "base": "x2", "tuned": "y2"}\nnot json\n{"other": 1}\n', encoding="utf-8")
    earlier = saved_compares(tmp_path)
    assert [e["prompt"] for e in earlier] == ["b", "a"]
    assert earlier[0]["when"] == "20260102-120000"
    assert saved_compares(tmp_path, limit=1) == earlier[:1] and saved_compares(tmp_path / "none") == []


def test_a_bf16_generation_copy_is_the_float_base_rounded_made_once_and_keeps_the_tuned_answers(
        trained_demo_run, parity_evals):
    """``generation_dtype = "bfloat16"``: the run's f32 base cast (never another bf16 load), its
    adapters too, kept for the next request; both sides say what they ran on; the tuned
    model still beats the base on the parity prompts."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from adapters_lib import runs
    from adapters_lib.evaluate import exact_match_text
    from adapters_lib.models import decode_layout
    from adapters_lib.sample.settings import SamplingSettings
    from adapters_lib.tuned.gemma import GemmaTuned

    run = runs.RunDir(trained_demo_run)
    f32 = GemmaTuned.from_run(run)
    bf = GemmaTuned.from_run(run, generation_dtype="bfloat16")
    assert bf.precision("base") == bf.precision("tuned") == {"dtype": "bfloat16", "quantize": "none"}
    assert f32.precision("tuned") == {"dtype": "float32", "quantize": "none"}
    assert decode_layout.holds(bf.loaded.params)  # the projections in the decode layout
    plain = decode_layout.standard(bf.loaded.params)
    for a, b in zip(jax.tree.leaves(f32.loaded.params), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(np.asarray(a.astype(jnp.bfloat16)), np.asarray(b))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(bf.adapters))
    again = GemmaTuned.from_run(run, generation_dtype="bfloat16")
    assert jax.tree.leaves(again.loaded.params)[0] is jax.tree.leaves(bf.loaded.params)[0]  # kept
    got = bf.compare([e["messages"][0]["content"] for e in parity_evals], SamplingSettings(max_new_tokens=8))
    answers = [e["messages"][1]["content"] for e in parity_evals]
    tuned = sum(exact_match_text(r["tuned"], a) for r, a in zip(got, answers, strict=True))
    base = sum(exact_match_text(r["base"], a) for r, a in zip(got, answers, strict=True))
    assert tuned > base, (base, tuned, got[:3])
