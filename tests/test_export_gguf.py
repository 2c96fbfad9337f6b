"""GGUF export: the merged model and the LoRA adapter as llama.cpp writes them, read back
by ``gguf.GGUFReader`` and by the project's own GGUF loader; the Modelfile; the refusals.
(llama.cpp itself runs the files in tests/test_export_gguf_llama.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.cli import main

TOKENS = [[2, 105, 371, 117, 489, 975, 1005, 488, 387, 486, 999, 106, 117, 105, 370, 117]]


@pytest.fixture(scope="module")
def tuned(trained_demo_run):
    from adapters_lib.tuned import load_run_model

    return load_run_model(trained_demo_run)


@pytest.fixture(scope="module")
def gguf_exports(trained_demo_run, tmp_path_factory):
    from adapters_lib.tuned import export_run

    out = tmp_path_factory.mktemp("gguf-exports")
    return {fmt: export_run(trained_demo_run, fmt, out=out / fmt, quant=quant)
            for fmt, quant in (("gguf", "f32"), ("gguf-lora", "f32"))}


def _tuned_logits(tuned):
    import jax.numpy as jnp

    apply, params = tuned.apply_fn("tuned")
    tokens = jnp.asarray(TOKENS)
    return np.asarray(apply(params, tokens, jnp.arange(tokens.shape[1])[None],
                            jnp.tril(jnp.ones((1, tokens.shape[1], tokens.shape[1]), bool))))


def _fields(path):
    import gguf

    reader = gguf.GGUFReader(path)
    return reader, {name: f.contents() for name, f in reader.fields.items()
                    if not name.startswith("GGUF.")}


def test_merged_gguf_carries_llama_cpps_gemma3_metadata_and_1_plus_w_norms(tuned, gguf_exports):
    from adapters_lib.export.merged import merged_params

    file = Path(gguf_exports["gguf"]["files"][0]["file"])
    reader, meta = _fields(file)
    assert meta["general.architecture"] == "gemma3" and meta["general.type"] == "model"
    assert meta["general.file_type"] == 0  # ALL_F32
    for key, want in {"block_count": 4, "embedding_length": 256, "feed_forward_length": 1024,
                      "attention.head_count": 4, "attention.head_count_kv": 1,
                      "attention.key_length": 64, "attention.value_length": 64,
                      "attention.sliding_window": 32, "rope.freq_base": 1e6,
                      "rope.freq_base_swa": 1e4, "context_length": 32768}.items():
        assert meta[f"gemma3.{key}"] == pytest.approx(want), key
    # the demo alternates local/global; llama.cpp's default for gemma3 is 5:1, so it is written
    assert meta["gemma3.attention.sliding_window_pattern"] == [True, False, True, False]
    assert "gemma3.final_logit_softcapping" not in meta
    assert meta["tokenizer.ggml.model"] == "llama" and len(meta["tokenizer.ggml.tokens"]) == 1024
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"],
            meta["tokenizer.ggml.padding_token_id"]) == (2, 1, 0)
    types = meta["tokenizer.ggml.token_type"]
    assert meta["tokenizer.ggml.tokens"][106] == "<end_of_turn>" and types[106] == 3  # CONTROL
    assert "<start_of_turn>" in meta["tokenizer.chat_template"]
    assert meta["tokenizer.ggml.add_space_prefix"] is False
    tensors = {t.name: t for t in reader.tensors}
    fused = merged_params(tuned.loaded, tuned.adapters, tuned.lora)
    np.testing.assert_array_equal(np.asarray(tensors["output_norm.weight"].data),
                                  np.asarray(fused["final_norm"]["scale"]) + 1)
    np.testing.assert_array_equal(np.asarray(tensors["blk.0.attn_q_norm.weight"].data),
                                  np.asarray(fused["layer_0"]["attn"]["_query_norm"]["scale"]) + 1)
    assert tuple(tensors["blk.0.attn_q.weight"].shape) == (256, 256)  # ne = [embed, heads·head_dim]


def test_merged_gguf_loads_in_the_project_loader_with_the_tuned_logits(tuned, gguf_exports):
    import jax.numpy as jnp

    from adapters_lib.config import ModelSpec
    from adapters_lib.models.loader import load_model

    file = gguf_exports["gguf"]["files"][0]["file"]
    loaded = load_model(ModelSpec(source=file))
    tokens = jnp.asarray(TOKENS)
    got = np.asarray(loaded.model.apply({"params": loaded.params}, tokens).logits)
    np.testing.assert_allclose(got, _tuned_logits(tuned), atol=2e-5, rtol=1e-5)  # f32 (norms ±1)
    # its rebuilt tokenizer encodes like the workbench's
    text = "Is 133 even or odd?\n    def f(x):  return x"
    assert loaded.tokenizer.encode(text) == tuned.loaded.tokenizer.encode(text)


@pytest.mark.parametrize("quant,matrix,ftype,tol", [("bf16", "BF16", 32, 1e-2), ("f16", "F16", 1, 2e-3),
                                                    ("q8_0", "Q8_0", 7, 2e-2), ("q4_0", "Q4_0", 2, 0.2)])
def test_quant_types_are_the_converters_and_dequantize_near_the_weights(tuned, tmp_path, quant,
                                                                        matrix, ftype, tol):
    from gguf import quants

    from adapters_lib.export import formats
    from adapters_lib.export.gguf import gguf_tensors, write_gguf
    from adapters_lib.export.gguf_run import arch_of
    from adapters_lib.export.merged import merged_params

    arch = arch_of(tuned.loaded)
    fused = merged_params(tuned.loaded, tuned.adapters, tuned.lora)
    info = write_gguf(tmp_path / "m.gguf", fused, arch, quant=quant, tokenizer=tuned.loaded.tokenizer_path)
    reader, meta = _fields(tmp_path / "m.gguf")
    assert meta["general.file_type"] == ftype
    want = gguf_tensors(fused, arch)
    for t in reader.tensors:
        assert t.tensor_type.name == ("F32" if t.name.endswith("norm.weight") else matrix), t.name
        got = np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32).reshape(want[t.name].shape)
        scale = float(np.abs(want[t.name]).max())
        assert float(np.abs(got - want[t.name]).max()) <= tol * scale, t.name
    estimate = formats.estimate_bytes("gguf", quant, matrix_params=arch.param_count())
    assert abs(info["bytes"] - estimate) < 0.1 * info["bytes"] + 64_000  # + the vocabulary


def test_lora_gguf_is_llama_cpps_adapter_layout_and_adds_up_to_the_merged_file(tuned, gguf_exports):
    lora = gguf_exports["gguf-lora"]
    adapter, base = (Path(f["file"]) for f in lora["files"])
    reader, meta = _fields(adapter)
    assert meta["general.architecture"] == "gemma3" and meta["general.type"] == "adapter"
    assert meta["adapter.type"] == "lora" and meta["adapter.lora.alpha"] == tuned.lora.alpha
    assert not any(k.startswith(("tokenizer.", "gemma3.")) for k in meta)
    ab = {t.name: np.asarray(t.data, np.float32) for t in reader.tensors}
    assert len(ab) == 2 * 7 * 4
    r = tuned.lora.rank
    a, b = ab["blk.0.attn_q.weight.lora_a"], ab["blk.0.attn_q.weight.lora_b"]
    assert a.shape == (r, 256) and b.shape == (256, r)  # numpy (r, in), (out, r): ne [in, r], [r, out]
    # base + (alpha / r) · B·A is the merged export, tensor by tensor (llama.cpp's LoRA rule)
    base_t = {t.name: np.asarray(t.data, np.float32) for t in _fields(base)[0].tensors}
    merged = {t.name: np.asarray(t.data, np.float32)
              for t in _fields(gguf_exports["gguf"]["files"][0]["file"])[0].tensors}
    scale = tuned.lora.alpha / r
    for name, value in merged.items():
        if f"{name}.lora_a" in ab:
            value_from_lora = base_t[name] + scale * (ab[f"{name}.lora_b"] @ ab[f"{name}.lora_a"])
            np.testing.assert_allclose(value_from_lora, value, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(base_t[name], value, err_msg=name)


def test_export_prints_the_files_and_the_ollama_create_line(trained_demo_run, capsys, tmp_path):
    out = tmp_path / "q8"
    assert main(["export", "--in-process", str(trained_demo_run), "--format", "gguf",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == str(out)
    assert any("fixture-q8_0.gguf" in line and "Q8_0" in line for line in printed)
    assert printed[-1] == f"Ollama: ollama create fixture -f {out / 'Modelfile'}"
    text = (out / "Modelfile").read_text()
    assert "\nFROM ./fixture-q8_0.gguf\n" in text and "ADAPTER" not in text
    assert 'PARAMETER stop "<end_of_turn>"' in text and "<start_of_turn>model" in text


def test_lora_modelfile_points_at_the_base_and_the_adapter(gguf_exports):
    text = Path(gguf_exports["gguf-lora"]["modelfile"]).read_text()
    assert "\nFROM ./base-f32.gguf\nADAPTER ./fixture-lora-f32.gguf\n" in text
    assert ".export-" not in text  # no staging path leaks into the file


def test_a_gguf_base_keeps_its_untouched_tensors_byte_for_byte(gguf_stores, tmp_path):
    """A base from Ollama's store (a mixed-type GGUF): ``--quant base`` copies what LoRA did not
    touch, re-quantizes the rest in its own type; the LoRA Modelfile says FROM the Ollama name."""
    import gguf
    from fixtures_generation import perturbed_lora

    from adapters_lib.config import LoraSpec, ModelSpec
    from adapters_lib.export.run import export_gemma
    from adapters_lib.models.loader import load_model
    from adapters_lib.tuned.gemma import GemmaTuned

    source = gguf_stores.ids["ollama"]
    loaded = load_model(ModelSpec(source=source))
    spec = LoraSpec(rank=4, alpha=8.0, targets=("q", "down"))
    tuned = GemmaTuned(loaded, lora=spec, adapters=perturbed_lora(loaded, spec), source=source)
    got = export_gemma(tuned, "gguf", tmp_path / "base", quant="base")
    base = {t.name: t for t in gguf.GGUFReader(gguf_stores.files["ollama"]).tensors}
    out = {t.name: t for t in gguf.GGUFReader(got["files"][0]["file"]).tensors}
    assert set(out) == set(base)
    for name, t in out.items():
        assert t.tensor_type == base[name].tensor_type, name
        touched = ".attn_q.weight" in name or ".ffn_down.weight" in name
        same = bytes(np.asarray(t.data).tobytes()) == bytes(np.asarray(base[name].data).tobytes())
        assert same != touched, name
    assert got["files"][0]["copied_from_base"] == len(base) - 2 * 4
    base_meta, out_meta = _fields(gguf_stores.files["ollama"])[1], _fields(got["files"][0]["file"])[1]
    assert out_meta["tokenizer.ggml.tokens"] == base_meta["tokenizer.ggml.tokens"]
    lora = export_gemma(tuned, "gguf-lora", tmp_path / "lora")
    assert "\nFROM gemma3:demo\nADAPTER ./" in Path(lora["modelfile"]).read_text()


def _one_line_error(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_k_quants_and_misplaced_quants_are_one_line_refusals(trained_demo_run, capsys, tmp_path):
    err = _one_line_error(capsys, ["export", str(trained_demo_run), "--format", "gguf",
                                   "--quant", "q4_k_m", "--out", str(tmp_path / "k")])
    assert "q4_k_m" in err and "llama-quantize" in err
    err = _one_line_error(capsys, ["export", str(trained_demo_run), "--format", "hf",
                                   "--quant", "q8_0", "--out", str(tmp_path / "h")])
    assert "--quant" in err
    err = _one_line_error(capsys, ["export", "--in-process", str(trained_demo_run), "--format",
                                   "gguf-lora", "--quant", "q4_0", "--out", str(tmp_path / "l")])
    assert "f32, bf16, f16, q8_0" in err


def test_a_full_fine_tune_has_no_gguf_adapter():
    from adapters_lib.config import load_config
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.export.run import check_format

    cfg = load_config(None, ["lora.enabled=false"])
    with pytest.raises(WorkbenchError, match="full fine-tune"):
        check_format(cfg, "gguf-lora")
    check_format(cfg, "gguf")


def test_the_tui_export_dialog_offers_each_gguf_quant_with_its_size():
    from workbench.screens.export_dialog import export_choices

    config = {"model": {"source": "demo"}, "lora": {"enabled": True, "rank": 8,
                                                     "targets": ["q", "v"]}}
    choices = dict(export_choices(config, total_params=4_850_000, lora_params=65_536))
    assert ("gguf", "q8_0") in choices and ("gguf", "f32") in choices and ("gguf-lora", "f32") in choices
    sizes = {q: choices[("gguf", q)].rsplit("~", 1)[1] for q in ("f32", "f16", "q8_0", "q4_0")}
    assert all(s.endswith("MB") for s in sizes.values()), sizes
    mb = {q: float(s.split()[0]) for q, s in sizes.items()}
    assert mb["f32"] > mb["f16"] > mb["q8_0"] > mb["q4_0"]
    assert choices[("gguf-lora", "f32")].endswith("~262.1 kB")
    full = dict(export_choices({"model": {"source": "demo"}, "lora": {"enabled": False}}))
    assert not any(fmt in ("adapter", "gguf-lora") for fmt, _ in full)
