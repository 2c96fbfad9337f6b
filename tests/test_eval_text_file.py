"""``eval`` scores a ``.txt`` file as written — BOS + the whole text + EOS, blank lines and the
final newline included — as keras-hub (``BOS + tokenize(text) + EOS``) and llama.cpp's
``perplexity`` read it; the ``scored`` line says so and ``--json``'s ``tokens`` is that count."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters_lib.evals import perplexity
from workbench.cli import main

TEXT = ("The river rose through the night, and by morning the low fields lay under water.\n"
        "Farmers moved their animals to the ridge.\n\nBy noon the rain had stopped.\n")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval-text") / "english.txt"
    path.write_text(TEXT)
    assert path.read_bytes().endswith(b".\n")
    return path


@pytest.fixture(scope="module")
def demo():
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec())


@pytest.fixture(scope="module")
def keras_hub_ids(demo):
    """keras-hub's tokens of the file: its ``GemmaTokenizer`` over the demo model's own
    SentencePiece proto (pieces renamed to keras-hub's ``<bos>``/``<eos>``, ids unchanged)."""
    from adapters_lib.keras_route.model import import_keras, keras_tokenizer

    import_keras()
    tok = keras_tokenizer(demo.tokenizer_path)
    return [int(tok.start_token_id), *np.asarray(tok.tokenize(TEXT)).tolist(), int(tok.end_token_id)]


def test_a_text_file_is_scored_as_keras_hub_tokenizes_it(demo, text_file, keras_hub_ids):
    tset = perplexity.tokenize_file(str(text_file), demo.tokenizer, max_length=512).train
    assert len(tset) == 1  # one text, not one per paragraph
    ids = tset.sequence(0)[0].tolist()
    assert ids == keras_hub_ids
    assert ids[-2] == demo.tokenizer.encode("\n")[-1]  # the final newline, then EOS
    result = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(text_file))
    assert result.tokens == len(keras_hub_ids) - 1 and result.eos_scored
    assert (result.bos_id, result.eos_id) == (keras_hub_ids[0], keras_hub_ids[-1])
    assert result.scored == (f"the file as written, blank lines and final newline included: BOS (id "
                             f"{keras_hub_ids[0]}) + {len(keras_hub_ids) - 2} text tokens + EOS (id "
                             f"{keras_hub_ids[-1]}); the {len(keras_hub_ids) - 1} after BOS scored")
    x = jnp.asarray([keras_hub_ids])  # the full-logits reference on keras-hub's tokens
    logp = jax.nn.log_softmax(demo.model.apply({"params": demo.params}, x).logits[0, :-1].astype(jnp.float32))
    nll = float(-jnp.take_along_axis(logp, x[0, 1:, None], axis=-1).mean())
    np.testing.assert_allclose(result.loss, nll, rtol=2e-5)


def test_eval_cli_says_what_it_scored_and_json_counts_it(text_file, keras_hub_ids, capsys):
    args = ["eval", "--in-process", "--model", "demo", "--data", str(text_file)]
    assert main([*args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["tokens"] == len(keras_hub_ids) - 1 and got["examples"] == 1
    assert "final newline included" in got["scored"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{got['tokens']} tokens scored" in out
    assert f"  scored: {got['scored']}" in out


def test_a_text_longer_than_max_length_counts_the_same_tokens_in_windows(demo, text_file, keras_hub_ids):
    whole = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(text_file))
    windows = perplexity.evaluate_file(demo.model, demo.params, demo.tokenizer, str(text_file), max_length=16)
    assert windows.tokens == whole.tokens == len(keras_hub_ids) - 1
    assert "--max-length windows, each after its own BOS (not scored)" in windows.scored
    assert windows.sequences > 1
