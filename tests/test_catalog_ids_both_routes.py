"""Every id ``models --json`` prints works wherever a path works, on both routes.

A catalog made for the test holds one checkpoint per format and place the catalog knows:
keras-hub-made Gemma 4 presets (dense, MoE, per-layer inputs + KV sharing) in a named folder and
in the kagglehub cache, an orbax checkpoint in the kagglehub cache and in a folder, HF safetensors
in the HF cache and in a folder, and one GGUF in a folder, the HF cache, Ollama's and LM Studio's
stores (plus the demo and, when its package is installed, the starter). The real CLI lists
them; each id then goes through each route's config check and load (``[model] backend`` =
"gemma" and "keras"): it loads, or it is refused with one line whose reason is true — a format
that route does not read, named — and never names a format the route reads as the reason.
"""

from __future__ import annotations

import json
import shutil

import pytest

from adapters_lib.errors import WorkbenchError

pytestmark = pytest.mark.slow  # keras-hub's import and a dozen tiny builds: ~1-2 min on 2 cores

GEMMA_READS = {"demo", "flax-orbax", "hf-safetensors", "keras-preset", "gguf"}
KERAS_READS = {"demo", "hf-safetensors", "keras-preset", "gguf"}
PRESETS = ("gemma4-dense", "gemma4-moe", "gemma4-e")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, keras_presets):
    """(environment, --path folder) of a catalog holding every format in every place."""
    from fixtures_gguf import ollama_store, write_gguf
    from fixtures_weights import (
        DEMO_ARCH,
        hf_cache_repo,
        hf_files,
        kaggle_model,
        tiny_params,
        write_orbax,
    )

    from adapters_lib.models import demo

    root = tmp_path_factory.mktemp("catalog-ids")
    tok = demo.ensure_demo_tokenizer()
    params = tiny_params(DEMO_ARCH, seed=5)
    kaggle, hf, folder = root / "kagglehub", root / "hf-hub", root / "models"
    for kind in PRESETS:  # as keras-hub saved them, named by a folder
        shutil.copytree(keras_presets(kind), folder / kind)
    dense = kaggle / "models" / "keras" / "gemma4" / "keras" / "gemma4_tiny_dense"
    shutil.copytree(keras_presets("gemma4-dense"), dense / "1")  # kagglehub's Keras layout
    (dense / "1.complete").touch()
    kaggle_model(kaggle, "google/gemma-3/flax/gemma3-demo/1", params, tok)
    write_orbax(folder / "orbax-demo", params)
    shutil.copy(tok, folder / "orbax-demo" / "tokenizer.model")
    safetensors = hf_files(params, DEMO_ARCH, tokenizer=tok)
    hf_cache_repo(hf, "google/gemma-3-demo", safetensors)
    (folder / "hf-demo").mkdir()
    for name, data in safetensors.items():
        (folder / "hf-demo" / name).write_bytes(data)
    gguf = write_gguf(folder / "gemma3-demo-q8_0.gguf", params, DEMO_ARCH, tokenizer=tok, default="Q8_0")
    hf_cache_repo(hf, "someone/gemma-3-demo-GGUF", {"gemma-3-demo-Q8_0.gguf": gguf.read_bytes()})
    ollama_store(root / "ollama", "gemma3", "demo", gguf.read_bytes())
    lms = root / "lmstudio" / "someone" / "gemma-3-demo-GGUF"
    lms.mkdir(parents=True)
    shutil.copy(gguf, lms / "gemma-3-demo-Q8_0.gguf")
    env = {"KAGGLEHUB_CACHE": str(kaggle), "HF_HUB_CACHE": str(hf), "OLLAMA_MODELS": str(root / "ollama"),
           "LMSTUDIO_MODELS": str(root / "lmstudio"), "HOME": str(root / "home")}
    return env, folder


@pytest.fixture
def listed(catalog, monkeypatch, capsys):
    """The entries ``gemma-workbench models --json --path FOLDER`` prints for the catalog."""
    from workbench.cli import main

    env, folder = catalog
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["models", "--json", "--path", str(folder)]) == 0
    return json.loads(capsys.readouterr().out)


def _config(source: str, backend: str):
    from adapters_lib.config import check_backend_options, config_from_dict

    cfg = config_from_dict({"model": {"source": source, "backend": backend},
                            "mesh": {"data": 1, "tensor": 1, "devices": 1},
                            "lora": {"rank": 2, "alpha": 4}})
    check_backend_options(cfg)
    return cfg


def _gemma_route(source: str, load: bool) -> None:
    from adapters_lib.config import ModelSpec
    from adapters_lib.engine.handlers.run_commands import _check_model
    from adapters_lib.models.loader import load_model

    cfg = _config(source, "gemma")
    _check_model(cfg)  # the engine's check before a run folder exists
    if load:
        loaded = load_model(ModelSpec(source=source))
        assert loaded.params and loaded.tokenizer is not None


def _keras_route(source: str, load: bool) -> None:
    from adapters_lib.engine.handlers.run_commands import _check_model
    from adapters_lib.keras_route.model import build_model, model_dims

    cfg = _config(source, "keras")
    _check_model(cfg)  # the engine's check before a run folder exists: metadata only
    if not load:  # the starter's 270M is not exported here
        return
    dims = model_dims(cfg)
    model = build_model(cfg, None)
    assert model.dims == dims and model.lora_layers


def _refusal_is_true(line: str, fmt: str, reads: set[str]) -> None:
    assert "\n" not in line, line
    assert fmt not in reads, f"a {fmt} checkpoint, which this route reads, was refused: {line}"
    assert fmt in line, f"the refusal does not name the format it cannot read ({fmt}): {line}"
    for accepted in reads - {"demo"}:  # an accepted format is never the reason
        assert f"not {accepted}" not in line and f"a {accepted} checkpoint" not in line, line


def test_models_json_lists_every_format_in_every_place(listed):
    got = {(e["source"], e["format"]) for e in listed if e["status"] == "ok"}
    want = {("builtin", "demo"), ("folder", "keras-preset"), ("kaggle", "keras-preset"),
            ("kaggle", "flax-orbax"), ("folder", "flax-orbax"), ("huggingface", "hf-safetensors"),
            ("folder", "hf-safetensors"), ("folder", "gguf"), ("huggingface", "gguf"),
            ("ollama", "gguf"), ("lmstudio", "gguf")}
    assert want <= got, want - got
    prefixes = {e["id"].split(":", 1)[0] for e in listed}
    assert {"demo", "local", "kaggle", "hf", "ollama", "lmstudio"} <= prefixes, prefixes


@pytest.mark.parametrize("backend", ["gemma", "keras"])
def test_every_listed_id_loads_or_is_refused_for_a_true_reason(listed, backend):
    reads = GEMMA_READS if backend == "gemma" else KERAS_READS
    route = _gemma_route if backend == "gemma" else _keras_route
    outcomes = {}
    for entry in listed:
        assert entry["status"] == "ok", entry  # the catalog holds good checkpoints only
        load = entry["source"] != "starter"  # the real 270M: tests/test_real_270m.py loads it
        try:
            route(entry["id"], load)
        except WorkbenchError as e:
            _refusal_is_true(str(e), entry["format"], reads)
            outcomes[entry["id"]] = "refused"
        else:
            assert entry["format"] in reads, f"{entry['id']} ({entry['format']}) was not refused"
            outcomes[entry["id"]] = "loaded"
    refused = {i for i, o in outcomes.items() if o == "refused"}
    orbax = {e["id"] for e in listed if e["format"] == "flax-orbax"}
    assert refused == (orbax if backend == "keras" else set()), outcomes


def test_a_keras_preset_named_by_its_id_is_the_same_source_as_its_path(listed):
    """The Models screen hands Configure the id: ``local:`` + the folder reads as the folder does,
    on the Keras route too (it once refused it as "not keras-preset")."""
    from adapters_lib.keras_route.model import keras_source, model_dims, preset_dir, tokenizer_path

    for entry in listed:
        if entry["format"] != "keras-preset":
            continue
        by_id, by_path = _config(entry["id"], "keras"), _config(entry["path"], "keras")
        assert keras_source(by_id) == keras_source(by_path)
        assert preset_dir(by_id) == preset_dir(by_path)
        assert model_dims(by_id) == model_dims(by_path)
        assert tokenizer_path(by_id) == tokenizer_path(by_path)


def test_a_keras_preset_trains_a_step_on_the_keras_route_by_its_id(listed, tmp_path):
    from adapters_lib import runs
    from adapters_lib.config import config_from_dict
    from adapters_lib.keras_route import run_keras_training

    entry = next(e for e in listed if e["format"] == "keras-preset" and e["id"].startswith("local:")
                 and e["path"].endswith("gemma4-moe"))
    cfg = config_from_dict({"model": {"source": entry["id"], "backend": "keras"},
                            "mesh": {"data": 1, "tensor": 1, "devices": 1}, "data": {"max_length": 32},
                            "lora": {"rank": 2, "alpha": 4, "targets": ["q", "v", "experts"]},
                            "train": {"steps": 1, "batch_size": 2, "eval_every": 1, "checkpoint_every": 1,
                                      "eval_batches": 1, "eval_exact_match": 0}, "run": {"name": "by-id"}})
    run = runs.create_run(cfg, root=tmp_path)
    result = run_keras_training(cfg, run)
    assert (result.state, result.step) == ("completed", 1), result.message
    assert result.final_loss is not None and result.final_loss == result.final_loss  # not NaN
