"""``eval``: loss/perplexity/tokens of a model or a run's checkpoint on a text or chat file."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters_lib.errors import WorkbenchError
from adapters_lib.evals import perplexity
from workbench.cli import main

CHATS = [
    {"messages": [{"role": "user", "content": "Is 17 even or odd?"},
                  {"role": "assistant", "content": "odd"}]},
    {"messages": [{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Which is larger, 3 or 8?"},
                  {"role": "assistant", "content": "8"},
                  {"role": "user", "content": "And 9 or 2?"},
                  {"role": "assistant", "content": "9"}]},
]
TEXT = "the quick brown fox jumps over the lazy dog\nand runs away\n\nsecond paragraph here\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    chat = root / "chat.jsonl"
    chat.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    text = root / "notes.txt"
    text.write_text(TEXT)
    return {"chat": chat, "text": text}


@pytest.fixture(scope="module")
def demo():
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec())


def test_chat_files_score_only_the_model_turns(demo, files):
    from adapters_lib.data import check_file

    ours = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(files["chat"]))
    every = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(files["chat"]),
                                     loss_on="all")
    report = check_file(str(files["chat"]), tokenizer=demo.tokenizer, max_length=512)
    assert ours.tokens == report.trained_tokens and ours.examples == 2
    assert every.tokens > ours.tokens
    assert ours.format == "chat" and math.isclose(ours.perplexity, math.exp(ours.loss))


def test_loss_equals_the_full_logits_reference(demo, files):
    result = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(files["text"]))
    ids = [2, *demo.tokenizer.encode(TEXT), 1]  # BOS + the file as written + EOS
    x = jnp.asarray([ids])
    logits = demo.model.apply({"params": demo.params}, x).logits[0, :-1]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    total = float(-jnp.take_along_axis(logp, x[0, 1:, None], axis=-1).sum())
    count = len(ids) - 1
    assert result.tokens == count and f"the {count} after BOS scored" in result.scored
    np.testing.assert_allclose(result.loss, total / count, rtol=2e-5)


def test_eval_cli_on_a_model_and_on_a_run_checkpoint(trained_demo_run, files, capsys):
    args = ["eval", "--in-process", "--data", str(files["chat"]), "--json"]
    assert main([*args, "--model", "demo"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert set(base) >= {"loss", "perplexity", "tokens"} and base["run"] is None
    assert main([*args, "--run", str(trained_demo_run), "--step", "20"]) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert (tuned["step"], tuned["tokens"], tuned["model"]) == (20, base["tokens"], "demo")
    assert tuned["loss"] != pytest.approx(base["loss"], rel=1e-4)  # the adapters are applied
    assert (base["bos_id"], base["eos_id"], base["eos_scored"]) == (2, 1, False)  # what is scored
    assert base["scored"] == "BOS (id 2) first, not scored; the model turns only (end-of-turn markers included); no EOS added"
    assert main(["eval", "--in-process", "--data", str(files["text"]), "--model", "demo"]) == 0
    out = capsys.readouterr().out
    assert "perplexity" in out
    scored = next(line for line in out.splitlines() if line.startswith("  scored: "))
    assert scored.startswith("  scored: the file as written, blank lines and final newline included: "
                             "BOS (id 2) + ") and " text tokens + EOS (id 1); the " in scored, scored


@pytest.mark.parametrize("argv, words", [
    (["--data", "/nonexistent.jsonl"], "not found"),
    (["--data", "{chat}", "--step", "3"], "--step needs --run"),
    (["--data", "{chat}", "--max-length", "2"], "max_length is 2"),
    (["--data", "{chat}", "--batch-size", "0"], "--batch-size is 0"),
    (["--data", "{chat}", "--run", "no-such-run"], "no-such-run"),
])
def test_bad_eval_input_is_one_line(argv, words, files, capsys):
    argv = [a.replace("{chat}", str(files["chat"])) for a in argv]
    assert main(["eval", "--in-process", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and words in err and "\n" not in err, err


def test_a_file_with_nothing_to_score_says_so(demo, tmp_path):
    only_users = tmp_path / "users.jsonl"
    only_users.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(WorkbenchError):
        perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(only_users))


def test_a_model_path_goes_to_the_engine_absolute(tmp_path, monkeypatch):
    """The engine's working directory is the first client's: ``--model ./x.gguf`` (eval,
    sample, compare) is sent as this directory's file; names the catalog takes first are not."""
    from workbench.commands._generation_args import model_ref

    (tmp_path / "my.gguf").write_bytes(b"GGUF")
    for name in ("weights", "demo", "gemma-3-270m"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert model_ref("my.gguf") == str(tmp_path / "my.gguf")
    assert model_ref("./weights") == str(tmp_path / "weights")
    assert model_ref("local:weights") == f"local:{tmp_path / 'weights'}"
    for as_typed in ("demo", "gemma-3-270m", "hf:google/gemma-3-1b-it", "starter:gemma-3-270m",
                     "missing.gguf", ""):
        assert model_ref(as_typed) == as_typed


def test_the_library_the_engine_and_eval_json_share_one_result_record(demo, files):
    from adapters_lib.engine import api

    result = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, files["chat"])
    assert api.Eval.reply is type(result)  # one record, not a copy kept in step by hand
    again = api.Eval.reply.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result and {"loss", "perplexity", "tokens"} <= set(again.to_json())
