"""GGUF weights: listed from their header in every store, loaded exactly, tokenizer rebuilt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from fixtures_weights import DEMO_ARCH, TINY_GEMMA2

from adapters_lib import catalog
from adapters_lib.config import ModelSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.models.loader import load_model


def _entries(env, *paths):
    return {e.id: e for e in catalog.list_models((env.folder, *paths))}


def test_every_store_lists_gguf_with_the_contract_fields(gguf_stores):
    env = gguf_stores
    entries = _entries(env)
    for name in ("f32", "q8", "mixed", "split", "hf", "ollama", "ollama_hf", "lmstudio"):
        e = entries[env.ids[name]]
        assert (e.status, e.format, e.family, e.size) == ("ok", "gguf", "gemma3", "custom"), (name, e)
        assert e.params == DEMO_ARCH.param_count(), name
        assert e.reason == "" and e.arch is not None and e.vocab_rows == DEMO_ARCH.vocab_size
        assert e.tokenizer_pieces == 1024 and e.tokenizer_mismatch == ""
        d = e.to_dict()
        assert d["format"] in catalog.FORMATS and d["source"] in catalog.SOURCES
    assert entries[env.ids["q8"]].quant == "Q8_0" and entries[env.ids["f32"]].quant == "F32"
    assert entries[env.ids["hf"]].source == "huggingface" and entries[env.ids["hf"]].variant == "it"
    assert entries[env.ids["ollama"]].source == "ollama" and entries[env.ids["ollama"]].variant == "pt"
    assert entries[env.ids["ollama_hf"]].variant == "it"
    assert entries[env.ids["lmstudio"]].source == "lmstudio"
    split = entries[env.ids["split"]]
    assert split.bytes == sum(p.stat().st_size for p in env.files["split"].parent.glob("*.gguf"))
    later = [e for e in entries.values() if "-00002-of-" in e.id]
    assert later == []  # a split file is one entry
    g2 = entries[env.ids["gemma2"]]
    assert (g2.status, g2.family, g2.params) == ("ok", "gemma2", TINY_GEMMA2.param_count())


def test_broken_gguf_files_say_why_in_one_line(gguf_stores):
    env = gguf_stores
    entries = _entries(env)
    expect = {"truncated": ("incomplete", "truncated"),
              "llama": ("unsupported", "a GGUF of Llama 3.2 1B Instruct (general.architecture = llama)"),
              "novocab": ("incomplete", "no tokenizer vocabulary"),
              "ollama_missing": ("incomplete", "is missing")}
    for name, (status, words) in expect.items():
        e = entries[env.ids[name]]
        assert e.status == status and words in e.reason and "\n" not in e.reason, (name, e.reason)
    assert entries[env.ids["llama"]].family == "other"


def test_a_file_cut_inside_its_vocabulary_is_incomplete_and_the_count_is_kept(gguf_env, tmp_path):
    """The catalog walks past the vocabulary's strings without keeping them (tui2: the 270M's
    header in ~0.1 s); a cut inside them still says so in one line."""
    from adapters_lib.models.gguf import GGUFError, read_info

    full = gguf_env.files["f32"].read_bytes()
    start = full.index(b"tokenizer.ggml.tokens")
    cut = tmp_path / "cut-in-vocab.gguf"
    cut.write_bytes(full[: start + 2000])
    with pytest.raises(GGUFError, match="string array .* runs past the end") as info:
        read_info(cut)
    assert info.value.status == "incomplete"
    assert read_info(gguf_env.files["f32"]).vocab_size == 1024


def test_architecture_comes_from_metadata_not_the_file_name(gguf_env, tmp_path):
    odd = tmp_path / "llama-2-7b-chat.Q4_K_M.gguf"
    shutil.copy(gguf_env.files["f32"], odd)
    e = catalog.resolve(str(odd))
    assert (e.family, e.size, e.quant, e.variant) == ("gemma3", "custom", "F32", "pt")
    named = tmp_path / "gemma-3-27b-it-Q8_0.gguf"
    shutil.copy(gguf_env.files["llama"], named)
    e = catalog.resolve(str(named))
    assert e.family == "other" and e.status == "unsupported"
    with pytest.raises(WorkbenchError, match="Llama 3.2 1B Instruct"):
        load_model(ModelSpec(source=str(named)))


def _leaves(tree):
    return {jax.tree_util.keystr(k): np.asarray(v, np.float32)
            for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_f32_gguf_loads_the_exact_weights_with_norms_undone(gguf_env):
    loaded = load_model(ModelSpec(source=str(gguf_env.files["f32"])))
    got, want = _leaves(loaded.params), _leaves(gguf_env.params)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=2e-7, rtol=0, err_msg=k)
    assert loaded.model.config.num_embed == DEMO_ARCH.vocab_size


def test_quantized_types_dequantize_close_to_the_weights(gguf_env):
    want = _leaves(gguf_env.params)
    for name, tol in (("q8", 0.004), ("mixed", 0.03)):
        got = _leaves(load_model(ModelSpec(source=str(gguf_env.files[name]))).params)
        worst = max(float(np.abs(got[k] - want[k]).max()) for k in want)
        assert 0 < worst < tol, (name, worst)


def test_bfloat16_and_sharding_are_applied_leaf_by_leaf(gguf_env):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("tensor",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("tensor"))
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def rule(path, sds):
        return rows if "input_embedding" in jax.tree_util.keystr(path) else rep

    loaded = load_model(ModelSpec(source=str(gguf_env.files["q8"])), param_dtype="bfloat16",
                        sharding=rule)
    embed = loaded.params["embedder"]["input_embedding"]
    assert embed.dtype == jax.numpy.bfloat16 and embed.sharding == rows
    assert embed.addressable_shards[0].data.shape == (DEMO_ARCH.vocab_size // 4, DEMO_ARCH.embed_dim)
    assert loaded.params["final_norm"]["scale"].sharding == rep


def test_rebuilt_tokenizer_encodes_like_the_original_and_is_cached(gguf_env):
    import sentencepiece as spm

    entry = catalog.resolve(str(gguf_env.files["q8"]))
    ours = spm.SentencePieceProcessor(model_file=entry.tokenizer)
    theirs = spm.SentencePieceProcessor(model_file=str(gguf_env.tokenizer))
    texts = ["<start_of_turn>user\nIs 17 even?<end_of_turn>\n<start_of_turn>model\n",
             "def f(x):\n    return x  +  1\n\n\tpass", "a    b     c", "  lead", "ünïcödé ✓ 日本"]
    for text in texts:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode("<start_of_turn>")[0] == 105 and ours.encode("<end_of_turn>") == [106]
    mtime = entry.tokenizer and __import__("os").stat(entry.tokenizer).st_mtime_ns
    again = catalog.resolve(str(gguf_env.files["q8"]))
    assert again.tokenizer == entry.tokenizer and __import__("os").stat(again.tokenizer).st_mtime_ns == mtime


def test_a_gguf_without_vocabulary_loads_only_with_a_tokenizer(gguf_env):
    with pytest.raises(WorkbenchError, match="no tokenizer vocabulary"):
        load_model(ModelSpec(source=str(gguf_env.files["novocab"])))
    loaded = load_model(ModelSpec(source=str(gguf_env.files["novocab"]),
                                  tokenizer=str(gguf_env.tokenizer)))
    assert loaded.tokenizer.encode("hello")


def test_models_json_lists_gguf_from_the_cli(gguf_stores, capsys):
    from workbench.cli import main

    assert main(["models", "--json", "--path", str(gguf_stores.folder)]) == 0
    listed = {e["id"]: e for e in json.loads(capsys.readouterr().out)}
    e = listed[gguf_stores.ids["ollama"]]
    assert e["format"] == "gguf" and e["quant"] == "Q8_0" and e["status"] == "ok"


def test_gemma2_and_split_ggufs_load(gguf_env):
    import jax.numpy as jnp
    from fixtures_weights import tiny_params

    from adapters_lib.models import families

    g2 = load_model(ModelSpec(source=str(gguf_env.files["gemma2"])))
    assert g2.family == "gemma2" and g2.model.config.attn_logits_soft_cap == 50.0
    reference = families.model_class(TINY_GEMMA2)()  # the same weights, gemma's own layout
    ids = jnp.asarray([[2, 105, 40, 41, 42, 43, 106, 7]])
    want = reference.apply({"params": tiny_params(TINY_GEMMA2, seed=4)}, ids).logits
    got = g2.model.apply({"params": g2.params}, ids).logits
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)
    split = _leaves(load_model(ModelSpec(source=str(gguf_env.files["split"]))).params)
    whole = _leaves(load_model(ModelSpec(source=str(gguf_env.files["q8"]))).params)
    assert all(np.array_equal(split[k], whole[k]) for k in whole)


_LIST = ("import json, sys\n"
         "from workbench.cli import main\n"
         "main(['models', '--json', '--path', sys.argv[1]])\n"
         "print('LOADED', json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
         "{'numpy', 'gguf'})))\n")


def _list_in_a_fresh_process(folder, home):
    env = dict(os.environ, GEMMA_WORKBENCH_HOME=str(home))
    out = subprocess.run([sys.executable, "-c", _LIST, str(folder)], capture_output=True,
                         text=True, timeout=120, env=env, check=True).stdout
    listed, loaded = out.rsplit("LOADED", 1)
    return {e["id"]: e for e in json.loads(listed)}, json.loads(loaded)


def test_a_second_listing_reads_gguf_headers_from_the_disk_cache(gguf_env, tmp_path):
    """Listing again imports neither numpy nor gguf (~0.6 s of the ~1.5 s a listing took);
    a file that changed, or a split file whose other shard went, is read again."""
    folder, home = tmp_path / "models", tmp_path / "home"
    shutil.copytree(gguf_env.files["split"].parent, folder / "split")
    whole = folder / "gemma3-demo-f32.gguf"
    shutil.copy(gguf_env.files["f32"], whole)
    shutil.copy(gguf_env.files["truncated"], folder / "gemma3-demo-truncated.gguf")
    first, loaded = _list_in_a_fresh_process(folder, home)
    assert "gguf" in loaded
    again, loaded = _list_in_a_fresh_process(folder, home)
    assert loaded == [] and again == first
    mine = {k: v for k, v in first.items() if str(folder) in v["path"]}
    assert sorted(e["status"] for e in mine.values()) == ["incomplete", "ok", "ok"], mine
    assert "truncated" in next(e["reason"] for e in mine.values() if e["status"] != "ok")

    whole.write_bytes(whole.read_bytes()[:-1000])  # cut: another size, another key
    (folder / "split" / "gemma3-demo-00002-of-00003.gguf").unlink()
    after, _ = _list_in_a_fresh_process(folder, home)
    cut, split = after[f"local:{whole.resolve()}"], after[
        f"local:{(folder / 'split' / 'gemma3-demo-00001-of-00003.gguf').resolve()}"]
    assert (cut["status"], split["status"]) == ("incomplete", "incomplete"), (cut, split)
    assert "truncated" in cut["reason"], cut["reason"]
    assert "missing" in split["reason"] and "00002-of-00003" in split["reason"], split["reason"]

    cache = home / "data" / "catalog" / "gguf-headers.json"
    cache.write_text("{not json")  # a damaged cache is read past and rewritten
    redone, loaded = _list_in_a_fresh_process(folder, home)
    assert redone == after and "gguf" in loaded
    assert json.loads(cache.read_text())["version"] >= 1
