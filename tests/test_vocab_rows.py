"""Embedding rows beyond the tokenizer (Gemma 3 HF: 262,208 rows, 262,144 pieces): generation
never emits an id the tokenizer cannot decode, and the catalog names a real mismatch."""

from __future__ import annotations

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest
from fixtures_weights import DEMO_ARCH, tiny_params

from adapters_lib import catalog
from adapters_lib.config import ModelSpec
from adapters_lib.models.loader import load_model

PADDED = dataclasses.replace(DEMO_ARCH, vocab_size=DEMO_ARCH.vocab_size + 64)


def _hf_folder(root, arch, tokenizer, *, loud_extra_rows: bool):
    from fixtures_weights import hf_files

    params = tiny_params(arch, seed=5)
    table = params["embedder"]["input_embedding"]
    if loud_extra_rows:  # rows past the tokenizer outscore every real token
        n = arch.vocab_size - DEMO_ARCH.vocab_size
        table[DEMO_ARCH.vocab_size:] = 100.0 * np.abs(table[:n]).mean() * np.sign(table[:n])
    folder = root / f"gemma3-rows-{arch.vocab_size}"
    folder.mkdir()
    for name, data in hf_files(params, arch, tokenizer=tokenizer).items():
        (folder / name).write_bytes(data)
    return folder


def _tokenizer():
    from adapters_lib.models import demo

    return demo.ensure_demo_tokenizer()


@pytest.fixture(scope="module")
def padded_folder(tmp_path_factory):
    return _hf_folder(tmp_path_factory.mktemp("rows"), PADDED, _tokenizer(), loud_extra_rows=True)


@pytest.fixture(scope="module")
def padded(padded_folder):
    return load_model(ModelSpec(source=str(padded_folder)))


def test_sampling_never_emits_an_id_without_a_piece(padded):
    from adapters_lib.sample import Sampler, SamplingSettings

    loaded = padded
    pieces = loaded.tokenizer.vocab_size
    assert loaded.model.config.num_embed == pieces + 64
    ids = jnp.asarray([[2, 105, 40, 41, 42]])
    logits = loaded.model.apply({"params": loaded.params}, ids).logits
    assert int(jnp.argmax(logits[0, -1])) >= pieces  # unmasked, greedy would pick a padding row
    sampler = Sampler.from_loaded(loaded)
    for settings in (SamplingSettings(max_new_tokens=12),
                     SamplingSettings(max_new_tokens=12, temperature=1.0, seed=3)):
        out = sampler.generate_grid(["Is 17 even?"], [None], settings)[0][0]
        assert out["tokens"] and max(out["tokens"]) < pieces, out


def test_greedy_eval_answers_stay_inside_the_tokenizer(padded):
    from adapters_lib import evaluate
    from adapters_lib.sample import prompts

    loaded = padded
    prompt = prompts.prompt_ids(loaded.tokenizer, [{"role": "user", "content": "Is 17 even?"}])
    answers = evaluate.greedy_answers(evaluate.model_apply_fn(loaded.model), loaded.params,
                                      loaded.tokenizer, [prompt], max_new_tokens=6)
    assert isinstance(answers[0], str)


def test_sample_cli_on_a_padded_checkpoint_prints_text(padded_folder, capsys):
    from workbench.cli import main

    assert main(["sample", "--model", str(padded_folder), "--prompt", "hi", "--json",
                 "--max-new-tokens", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out.get("text"), str)


def test_catalog_names_a_tokenizer_that_does_not_fit(tmp_path):
    tok = _tokenizer()
    padded = catalog.resolve(str(_hf_folder(tmp_path, PADDED, tok, loud_extra_rows=False)))
    assert (padded.vocab_rows, padded.tokenizer_pieces, padded.tokenizer_mismatch) == \
        (1088, 1024, "")
    big = dataclasses.replace(DEMO_ARCH, vocab_size=4096)
    wide = catalog.resolve(str(_hf_folder(tmp_path, big, tok, loud_extra_rows=False)))
    assert "4,096 embedding rows but the tokenizer only 1,024" in wide.tokenizer_mismatch
    small = dataclasses.replace(DEMO_ARCH, vocab_size=512)
    narrow = catalog.resolve(str(_hf_folder(tmp_path, small, tok, loud_extra_rows=False)))
    assert "ids from 512 on would fail" in narrow.tokenizer_mismatch
    assert catalog.vocab_mismatch(262_208, 262_144) == ""
