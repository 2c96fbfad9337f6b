"""The catalog lists weights in every layout, with status and reason, without loading them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from adapters_lib import catalog
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from workbench.cli import main


def _by_id(env, extra=()):
    return {e.id: e for e in catalog.list_models((env.folder, *extra))}


def test_every_layout_is_listed_with_the_contract_fields(weights_cache):
    env = weights_cache
    entries = _by_id(env)
    for name, entry_id in env.ids.items():
        assert entry_id in entries, f"{name} ({entry_id}) missing from the listing"
    for entry in entries.values():
        d = entry.to_dict()
        assert set(d) >= {"id", "family", "size", "variant", "format", "path", "tokenizer",
                          "bytes", "params", "status", "reason"}
        assert d["format"] in catalog.FORMATS and d["status"] in catalog.STATUSES
        assert d["family"] in families.FAMILIES
        assert (d["status"] == "ok") == (d["reason"] == "" or d["format"] == "demo"), d
    assert entries["demo"].format == "demo" and entries["demo"].status == "ok"


def test_kaggle_flax_checkpoint_reads_family_params_and_tokenizer(weights_cache):
    env = weights_cache
    entries = _by_id(env)
    for name in ("ok_flat", "ok_nested"):
        e = entries[env.ids[name]]
        assert (e.status, e.format, e.family, e.variant) == ("ok", "flax-orbax", "gemma3", "it")
        assert e.params == families.KNOWN[("gemma3", "custom")][1].param_count()
        assert e.tokenizer and e.tokenizer.endswith("tokenizer.model")
        assert e.bytes > 4 * e.params * 0.9  # float32 arrays on disk


def test_broken_inputs_are_listed_with_a_one_line_reason(weights_cache):
    env = weights_cache
    entries = _by_id(env)
    expect = {
        "incomplete": ("incomplete", "completion marker"),
        "corrupt": ("unreadable", "damaged"),
        "no_tokenizer": ("incomplete", "no tokenizer.model"),
        "odd_shapes": ("unsupported", "shapes match no known gemma3 config"),
        "hf_llama": ("unsupported", "'llama' model"),
        "hf_truncated": ("unreadable", "truncated"),
        "hf_partial": ("incomplete", "shard missing"),
        "keras_no_weights": ("incomplete", "model.weights.h5"),
    }
    for name, (status, words) in expect.items():
        e = entries[env.ids[name]]
        assert e.status == status, (name, e.status, e.reason)
        assert words in e.reason and "\n" not in e.reason, (name, e.reason)
    assert entries[env.ids["hf_llama"]].family == "other"


def test_hf_cache_single_and_sharded_safetensors(weights_cache):
    env = weights_cache
    entries = _by_id(env)
    single, sharded = entries[env.ids["hf_single"]], entries[env.ids["hf_sharded"]]
    for e in (single, sharded):
        assert (e.status, e.format, e.family, e.source) == ("ok", "hf-safetensors", "gemma3",
                                                            "huggingface")
        assert "/snapshots/" in e.path and e.tokenizer
    assert single.params == sharded.params
    assert single.variant == "it" and sharded.variant == "pt"
    g2 = entries[env.ids["hf_gemma2"]]
    assert (g2.status, g2.family, g2.size) == ("ok", "gemma2", "custom")


def test_keras_preset_is_listed_with_its_tokenizer(weights_cache):
    e = _by_id(weights_cache)[weights_cache.ids["keras"]]
    assert (e.format, e.family, e.status) == ("keras-preset", "gemma3", "ok")
    assert e.tokenizer.endswith("assets/tokenizer/vocabulary.spm")


def test_folders_from_user_config_are_scanned(weights_cache, workbench_home):
    env = weights_cache
    config = catalog.user_config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'folders = ["{env.folder / "exports"}", "/nonexistent/models"]\n')
    try:
        ids = {e.id for e in catalog.list_models()}
        assert env.ids["folder_hf"] in ids and env.ids["keras"] not in ids
        relative = os.path.relpath(env.folder / "exports", config.parent)
        config.write_text(f'folders = ["{relative}"]\n')  # relative to models.toml's folder
        assert env.ids["folder_hf"] in {e.id for e in catalog.list_models()}
        config.write_text("folders = 3\n")
        with pytest.raises(WorkbenchError, match="folders"):
            catalog.list_models()
    finally:
        config.unlink()


def test_a_folder_of_models_with_one_checkpoint_lists_each_model(weights_cache, tmp_path):
    """A folder holding one orbax checkpoint beside a GGUF and an export is a folder of models,
    not one kagglehub-style model (which hid the other two), and a checkpoint kept in a
    sub-folder named ``checkpoint`` is not taken for orbax's ``checkpoint`` marker file
    (found by the 50-entry catalog bench)."""
    import shutil

    import numpy as np
    from fixtures_gguf import write_gguf
    from fixtures_weights import DEMO_ARCH
    from safetensors.numpy import save_file

    env = weights_cache
    mine = tmp_path / "models"
    run = mine / "gemma3-lora-step1000"
    shutil.copytree(env.kaggle / "models/google/gemma-3/flax/gemma3-demo-it/1/gemma3-demo-it",
                    run / "checkpoint")
    shutil.copy(env.tokenizer, run / "tokenizer.model")
    gguf = write_gguf(mine / "gemma-3-demo-Q8_0.gguf", env.params, DEMO_ARCH, tokenizer=env.tokenizer,
                      default="Q8_0")
    shutil.copytree(env.folder / "exports" / "gemma3-demo-export", mine / "exports" / "merged")
    adapter = mine / "exports" / "adapter"  # a PEFT adapter is no model: not listed (was "incomplete")
    adapter.mkdir()
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 64), np.float32)},
              str(adapter / "adapter_model.safetensors"))
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4}')
    found = {e.id: e for e in catalog.scan_folder(mine)}
    want = {f"local:{p.resolve()}": fmt for p, fmt in ((run, "flax-orbax"), (gguf, "gguf"),
                                                       (mine / "exports" / "merged", "hf-safetensors"))}
    assert {i: found[i].format for i in found} == want
    assert all(e.status == "ok" and e.family == "gemma3" for e in found.values()), found
    assert found[f"local:{run.resolve()}"].checkpoint == str(run / "checkpoint")


def test_resolve_by_id_handle_and_path(weights_cache, monkeypatch):
    env = weights_cache
    assert catalog.resolve(env.ids["hf_single"]).format == "hf-safetensors"
    assert catalog.resolve("google/gemma-3/flax/gemma3-demo-it/1").id == env.ids["ok_flat"]
    by_path = catalog.resolve(str(env.folder / "exports" / "gemma3-demo-export"))
    assert by_path.status == "ok" and by_path.family == "gemma3"
    monkeypatch.chdir(env.folder / "exports")  # a relative path: to the current directory
    relative = catalog.resolve("gemma3-demo-export")
    assert (relative.id, relative.path) == (by_path.id, by_path.path)
    assert os.path.isabs(relative.path)
    in_cache = catalog.resolve(str(env.kaggle / "models/google/gemma-3/flax/gemma3-1b-pt/1"))
    assert (in_cache.id, in_cache.status) == (env.ids["incomplete"], "incomplete")
    with pytest.raises(WorkbenchError, match="did you mean"):
        catalog.resolve("hf:google/gemma-3-demo-itt")
    with pytest.raises(WorkbenchError, match="--path"):
        catalog.list_models(["/nonexistent/dir"])


def test_known_sizes_mirror_gemma_configs():
    from gemma import gm

    for (family, _size), (name, arch) in families.KNOWN.items():
        if name == "demo" or family == "gemma4":  # Gemma 4's: tests/test_gemma4.py
            continue
        ours = arch.transformer_config()
        theirs = getattr(gm.nn, name).config
        for field in ("embed_dim", "hidden_dim", "num_heads", "head_dim", "num_kv_heads",
                      "final_logit_softcap", "attn_logits_soft_cap", "sliding_window_size",
                      "transpose_gating_einsum", "use_qk_norm", "local_base_frequency",
                      "global_base_frequency", "global_scale_factor", "query_pre_attn_norm",
                      "attention_types", "num_embed"):
            assert getattr(ours, field) == getattr(theirs, field), (name, field)


GEMMA2_2B_CONFIG = {  # google/gemma-2-2b-it config.json (abridged to the keys read)
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_size": 2304,
    "intermediate_size": 9216, "num_attention_heads": 8, "num_hidden_layers": 26,
    "num_key_value_heads": 4, "query_pre_attn_scalar": 256, "rope_theta": 10000.0,
    "sliding_window": 4096, "vocab_size": 256000}
GEMMA3_1B_CONFIG = {  # google/gemma-3-1b-it config.json (abridged)
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144}
GEMMA3_4B_CONFIG = {  # google/gemma-3-4b-it: text_config keeps only non-default keys
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024}}


@pytest.mark.parametrize("config, size", [(GEMMA2_2B_CONFIG, "2b"), (GEMMA3_1B_CONFIG, "1b"),
                                          (GEMMA3_4B_CONFIG, "4b")])
def test_release_configs_map_to_gemma_sizes(config, size):
    arch = families.from_hf_config(config)
    assert families.size_of(arch) == size
    family, (_, known) = next((k[0], v) for k, v in families.KNOWN.items() if k[1] == size)
    assert arch.attention == known.attention
    assert (arch.local_rope, arch.global_rope, arch.global_rope_scale) == \
        (known.local_rope, known.global_rope, known.global_rope_scale)
    assert arch.transpose_gating == known.transpose_gating
    assert arch.sliding_window == known.sliding_window


def test_cli_lists_json_and_table(weights_cache, capsys):
    env = weights_cache
    assert main(["models", "--json", "--path", str(env.folder)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {e["id"] for e in listed} >= set(env.ids.values())
    assert main(["models", "--path", str(env.folder)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["ID", "FAMILY", "SIZE"]
    assert "└ config.json describes a 'llama' model" in table


def test_listing_imports_no_ml_framework(weights_env):
    code = (
        "import sys, json\n"
        "from workbench.cli import main\n"
        f"main(['models', '--json', '--path', {str(weights_env.folder)!r}])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'jax', 'gemma', 'keras', 'tensorflow', 'flax', 'orbax'})\n"
        "print('HEAVY', json.dumps(heavy))\n"
    )
    env = {"KAGGLEHUB_CACHE": str(weights_env.kaggle), "HF_HUB_CACHE": str(weights_env.hf),
           "PATH": "/usr/bin:/bin", "HOME": str(weights_env.folder)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env, check=True).stdout
    listed = json.loads(out[: out.rindex("HEAVY")])
    assert len(listed) > 10
    assert out.strip().splitlines()[-1] == "HEAVY []"
