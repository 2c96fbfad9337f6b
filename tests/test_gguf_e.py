"""Gemma 4 and Gemma 3n GGUFs in llama.cpp's layout (tests/fixtures_gguf_e.py): listed with
their family and params, their architecture read from the metadata, loaded into gemma's tree
exactly, the tokenizer rebuilt from the file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fixtures_gguf_e import write_gguf_e


def _flat(tree) -> dict[tuple[str, ...], np.ndarray]:
    import jax

    return {tuple(k.key for k in p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.fixture(scope="module")
def shapes(gemma4_tiny, gemma3n_tiny):
    return {**gemma4_tiny, "3n": gemma3n_tiny}


@pytest.mark.parametrize("kind,variant", [("dense", {}), ("moe", {"split_experts": True}),
                                          ("e", {"drop_shared_kv": True}), ("3n", {})])
def test_the_architecture_comes_from_the_metadata_and_the_weights_load_exactly(shapes, kind, variant, tmp_path):
    """MoE: the experts as llama.cpp's older converter split them; E-style: the KV-shared layers'
    k/v dropped (transformers' save does, llama.cpp allows it)."""
    from adapters_lib.models.gguf import gguf_arch, load_gguf_params, read_info

    arch, _, params = shapes[kind]
    info = read_info(write_gguf_e(tmp_path / f"{kind}.gguf", params, arch, **variant))
    read = gguf_arch.arch_from_gguf(info)
    assert read == arch
    loaded = _flat(load_gguf_params(info, read, "float32", lambda path, sds: None))
    want = _flat(params)
    assert set(loaded) == set(want)
    for path, value in want.items():
        if kind == "e" and path[0] in ("layer_2", "layer_3") and path[1:3] in (("attn", "kv_einsum"), ("attn", "key_norm")):
            continue  # dropped from the file: filled (the library computes and discards them)
        np.testing.assert_array_equal(loaded[path], value, err_msg=str(path))


def test_listed_with_family_params_and_a_tokenizer_that_encodes_alike(shapes, gemma4_tokenizer, tmp_path):
    """Gemma 4's GGUF vocabulary is transformers' BPE (pieces + merges): the rebuilt tokenizer
    encodes as the original; Gemma 3n's is SentencePiece padded to the multimodal rows."""
    import sentencepiece as spm

    from adapters_lib import catalog
    from adapters_lib.models import demo
    from adapters_lib.models.gguf import tokenizer_for_gguf

    e_arch, _, e_params = shapes["moe"]
    n_arch, _, n_params = shapes["3n"]
    write_gguf_e(tmp_path / "g4-moe.gguf", e_params, e_arch, tokenizer=gemma4_tokenizer)
    write_gguf_e(tmp_path / "g3n.gguf", n_params, n_arch, tokenizer=demo.ensure_demo_tokenizer())
    entries = {e.path.rsplit("/", 1)[-1]: e for e in catalog.list_models([str(tmp_path)]) if e.path.startswith(str(tmp_path))}
    moe, g3n = entries["g4-moe.gguf"], entries["g3n.gguf"]
    assert (moe.status, moe.family, moe.format) == ("ok", "gemma4", "gguf"), moe.reason
    assert (moe.params, moe.params_active) == (e_arch.param_count(), e_arch.active_params())
    assert moe.params_active < moe.params
    assert (g3n.status, g3n.family, g3n.tokenizer_mismatch) == ("ok", "gemma3n", ""), g3n.reason
    assert g3n.params_effective == n_arch.effective_params() < g3n.params
    text = "the model answers the user in one short line <|turn>user\nhello<turn|>"
    rebuilt = spm.SentencePieceProcessor(model_file=str(tokenizer_for_gguf(tmp_path / "g4-moe.gguf")))
    original = spm.SentencePieceProcessor(model_file=gemma4_tokenizer)
    assert rebuilt.encode(text) == original.encode(text)
    assert rebuilt.piece_to_id("<turn|>") == 106
    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    for name, family, tokenizer in (("g4-moe", "gemma4", "Gemma4Tokenizer"), ("g3n", "gemma3n", "Gemma3nTokenizer")):
        loaded = load_model(ModelSpec(source=str(tmp_path / f"{name}.gguf")))  # the tokenizer rebuilt
        assert (loaded.family, type(loaded.tokenizer).__name__) == (family, tokenizer)
        assert loaded.tokenizer.special_tokens.END_OF_TURN == 106


def test_a_rope_freqs_tensor_of_another_rotary_share_is_refused_in_one_line(shapes, gemma4_tokenizer, tmp_path):
    from adapters_lib.config import ModelSpec
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.models.families import gemma4
    from adapters_lib.models.loader import load_model

    arch, _, params = shapes["dense"]
    other = dataclasses.replace(arch, global_rope_proportion=0.5)
    path = write_gguf_e(tmp_path / "half-rotary.gguf", params, other)
    assert isinstance(other, gemma4.Gemma4Arch)
    with pytest.raises(WorkbenchError) as e:
        load_model(ModelSpec(source=str(path), tokenizer=gemma4_tokenizer))
    assert "rope_freqs rotates 0.5" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def llama_cpp():
    """llama-cpp-python as ``scripts/build_llama_cpp.sh`` builds it (tests/test_export_gguf_llama.py);
    skipped, saying so, when it is absent."""
    import os
    import sys
    from pathlib import Path

    where = Path(os.environ.get("GEMMA_WORKBENCH_LLAMA_CPP", Path.home() / ".cache" / "gemma-workbench" / "llama-cpp"))
    if not (where / "llama_cpp").is_dir():
        pytest.skip(f"llama-cpp-python is not built in {where}: run scripts/build_llama_cpp.sh")
    sys.path.insert(0, str(where))
    try:
        import llama_cpp
    except Exception as e:  # noqa: BLE001 - a broken build is a skip with its reason
        pytest.skip(f"llama_cpp in {where} does not import: {e}")
    return llama_cpp


@pytest.mark.parametrize("kind,variant", [("dense", {}), ("moe", {}), ("e", {"drop_shared_kv": True})])
def test_llama_cpp_reads_the_same_gemma4_gguf_to_the_same_logits(llama_cpp, shapes, gemma4_tokenizer,
                                                                  kind, variant, tmp_path):
    """llama.cpp's own Gemma 4 graph on the file our loader reads: every position's logits within
    llama.cpp's f32 kernel error (its GELU is approximate), the same arg-max. The MoE routes as
    llama.cpp does (on the raw residual)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models import families
    from adapters_lib.models.gguf import gguf_arch, load_gguf_params, read_info

    arch, _, params = shapes[kind]
    path = write_gguf_e(tmp_path / f"{kind}.gguf", params, arch, tokenizer=gemma4_tokenizer, **variant)
    info = read_info(path)
    read = gguf_arch.arch_from_gguf(info)
    loaded = load_gguf_params(info, read, "float32", lambda path_, sds: None)
    ids = [2] + [int(t) for t in np.random.default_rng(1).integers(110, arch.vocab_size, 11)]
    ours = np.asarray(jax.jit(lambda p: families.model_class(read)(dtype=jnp.float32).apply(
        {"params": p}, jnp.asarray([ids])).logits)(loaded))[0]
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_batch=32, n_ubatch=32, n_threads=2, verbose=False,
                          logits_all=True, type_k=0, type_v=0)  # f32 KV cache
    llm.eval(ids)
    theirs = np.asarray(llm.scores[: len(ids)])
    np.testing.assert_allclose(ours, theirs, atol=2e-3 * float(np.abs(theirs).max()))
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
