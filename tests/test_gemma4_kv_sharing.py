"""Gemma 4 E-models whose KV-shared layers read other layers than gemma's own rule would.

keras-hub's ``Gemma4Backbone`` (and transformers) feed each KV-shared layer the k/v of the last
unshared layer of its kind; gemma's ``create_kv_cache_sharing_patterns`` (and llama.cpp) the
last unshared layer for a global one and the one before for a local one. They agree on every
release (E2B, E4B: the unshared layers end local, global) and part elsewhere: keras-hub's
``sliding_window_pattern = 3`` on 7 layers, 3 shared (they end global, local), or 5:1 on 6
layers, 2 shared (layer 4, global, has no unshared global: keras-hub keeps its own k/v).
``arch.kv_sources`` is the one rule; gemma's modules run it (``kv_sharing_patterns``). Such a
preset, built and saved by keras-hub's own classes, loads on both routes with keras-hub's
logits and ``eval`` perplexity; its HF and GGUF forms read the same layers; cached decode is
the uncached forward; LoRA trains and compare answers on both routes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures_keras import keras_g4_config
from test_keras_hub_oracle import _perplexity, eval_perplexity, keras_hub_logits

ODD = ["gemma4-e-window3", "gemma4-e-window5"]
TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def _keras_backbone(folder):
    from adapters_lib.keras_route.model import import_keras

    import_keras()
    import keras_hub

    return keras_hub.models.Backbone.from_preset(str(folder), dtype="float32")


def _keras_sources(backbone) -> dict[int, int]:
    return {i: b.kv_shared_layer_index for i, b in enumerate(backbone.transformer_layers) if b.is_kv_shared_layer}


def test_gemmas_own_rule_names_the_same_layers_only_where_the_unshared_layers_end_local_global():
    """gemma's ``create_kv_cache_sharing_patterns`` against ``kv_reads`` (keras-hub's rule: the
    presets below check it against keras-hub's own backbone) on keras-hub's layer patterns;
    and gemma's ``int(n - frac·n)`` makes 15 of 25 layers shared where 14 were asked: the count
    is rounded."""
    from gemma.gm.nn.gemma4 import _config, _modules

    from adapters_lib.models.families import gemma4
    from adapters_lib.models.families.arch import kv_reads

    for layers, window, shared in [(35, 5, 20), (42, 6, 18), (7, 3, 3), (6, 5, 2), (9, 4, 5), (5, 2, 2)]:
        kinds = tuple("global" if i % window == window - 1 else "local" for i in range(layers))
        enums = tuple(_modules.AttentionType.GLOBAL if k == "global" else _modules.AttentionType.LOCAL_SLIDING
                      for k in kinds)
        gemmas = tuple(_config.create_kv_cache_sharing_patterns(
            _config.KVCacheSharingConfig(shared / layers, True, True), layers, enums))
        ends_local_global = kinds[layers - shared - 2: layers - shared] == ("local", "global")
        assert (gemmas == kv_reads(kinds, shared)) == ends_local_global, (layers, window, shared)
    assert len(gemma4.shared_kv_layers(("local",) * 25, 14 / 25)) == 14


@pytest.fixture(scope="module")
def loaded_presets(keras_presets):
    """``loaded_presets(kind)`` → ``weights.load_entry`` of that preset, loaded once for the
    tests below that only read it (the tests' forwards then share gemma's compiled program:
    every one of them runs the same ``[2, 12]`` token shape)."""
    from adapters_lib.catalog import resolve
    from adapters_lib.models import weights

    made: dict[str, object] = {}

    def get(kind: str):
        if kind not in made:
            made[kind] = weights.load_entry(resolve(str(keras_presets(kind))))
        return made[kind]

    return get


@pytest.mark.parametrize("kind", ODD)
def test_a_keras_hub_e_preset_loads_on_the_gemma_route_with_keras_hubs_perplexity(keras_presets, loaded_presets,
                                                                                    kind):
    """Listed ``ok``; the gemma modules on the converted params give keras-hub's logits and
    ``eval``'s perplexity is keras-hub's (f32; the bar is 1 %, measured within 1e-6)."""
    import jax.numpy as jnp

    from adapters_lib.catalog import resolve
    from adapters_lib.keras_route.backbones import model_inputs

    folder = keras_presets(kind)
    entry = resolve(str(folder))
    assert (entry.family, entry.status) == ("gemma4", "ok"), entry.reason
    backbone = _keras_backbone(folder)
    assert entry.arch.kv_sources() == _keras_sources(backbone)
    loaded = loaded_presets(kind)
    tokens = np.random.default_rng(0).integers(3, 1024, (2, 12)).astype(np.int32)
    ours = np.asarray(loaded.model.apply({"params": loaded.params}, jnp.asarray(tokens)).logits)
    import keras_hub

    lm = keras_hub.models.Gemma4CausalLM(backbone=backbone, preprocessor=None)
    theirs = np.asarray(lm(model_inputs(backbone, tokens, np.ones_like(tokens))))
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=0)
    assert eval_perplexity(loaded.model, loaded.params, tokens) == pytest.approx(_perplexity(theirs, tokens),
                                                                                 rel=1e-5)


def test_a_gemma3n_preset_whose_unshared_layers_end_global_global_gives_keras_hubs_logits(keras_presets):
    """Gemma 3n follows the same rule (keras-hub's ``Gemma3nTextModel``: the last unshared layer
    of the same type): layer 3 (local) reads layer 0, where gemma's rule would read layer 1."""
    import jax.numpy as jnp
    from test_keras_presets import _keras_logits

    from adapters_lib.catalog import resolve
    from adapters_lib.models import weights

    folder = keras_presets("gemma3n-odd")
    entry = resolve(str(folder))
    assert (entry.family, entry.status) == ("gemma3n", "ok") and entry.arch.kv_sources() == {3: 0, 4: 2}
    loaded = weights.load_entry(entry)
    tokens = np.random.default_rng(0).integers(3, 1024, (2, 12)).astype(np.int32)
    ours = np.asarray(loaded.model.apply({"params": loaded.params}, jnp.asarray(tokens)).logits)
    theirs, _ = _keras_logits(folder, tokens)
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=0)


def test_hf_and_gguf_forms_read_the_same_layers(keras_presets, loaded_presets, tmp_path):
    """The preset's weights as transformers lays them out (keras-hub's own HF converter reads
    them back) and as llama.cpp's GGUF (the KV-shared layers' k/v dropped): one architecture,
    keras-hub's logits from all three."""
    import jax
    import jax.numpy as jnp
    from fixtures_gguf_e import write_gguf_e

    from adapters_lib.catalog import resolve
    from adapters_lib.models import families, weights
    from adapters_lib.models.gguf import gguf_arch, load_gguf_params, read_info
    from adapters_lib.models.hf import hf_convert

    arch, loaded = resolve(str(keras_presets("gemma4-e-window3"))).arch, loaded_presets("gemma4-e-window3")
    params = jax.tree.map(np.asarray, loaded.params)
    hf = tmp_path / "hf"
    hf_convert.save_hf(hf, hf_convert.gemma_to_hf(params, arch=arch), families.hf_config_for(arch))
    assert families.from_hf_config(json.loads((hf / "config.json").read_text())) == arch
    tokens = np.random.default_rng(1).integers(3, 1024, (2, 12)).astype(np.int32)
    theirs = keras_hub_logits(hf, tokens, "Gemma4Backbone")
    info = read_info(write_gguf_e(tmp_path / "e.gguf", params, arch, drop_shared_kv=True))
    assert gguf_arch.arch_from_gguf(info) == arch
    model = families.model_class(arch)(dtype=jnp.float32)
    for form in (weights.load_hf_params(hf, arch, "float32", None),
                 load_gguf_params(info, arch, "float32", lambda path, sds: None)):
        ours = np.asarray(model.apply({"params": form}, jnp.asarray(tokens)).logits)
        np.testing.assert_allclose(ours, theirs, atol=2e-5 * max(1.0, float(np.abs(theirs).max())))


def test_cached_decode_through_the_remapped_layers_equals_the_uncached_forward(loaded_presets):
    from test_gemma4_sampling import _greedy_without_cache

    from adapters_lib import evaluate, greedy_cache
    from adapters_lib.sample import Sampler, SamplingSettings

    loaded = loaded_presets("gemma4-e-window3")
    sampler = Sampler(loaded.model, loaded.params, loaded.tokenizer)
    prompt = "Reverse the words: apple river stone"
    [[row]] = sampler.generate_grid([prompt], [None], SamplingSettings(max_new_tokens=12))
    want = _greedy_without_cache(loaded.model, loaded.params, sampler.encode(prompt), 12, sampler.end_tokens)
    assert row["tokens"] == want and len(want) >= 4
    apply_fn = evaluate.model_apply_fn(loaded.model)
    assert greedy_cache.decoder_for(apply_fn) is not None
    [(answer, _)] = evaluate.greedy_completions(apply_fn, loaded.params, sampler.tokenizer,
                                                [sampler.encode(prompt)], max_new_tokens=12)
    assert answer == want


def test_lora_adapts_k_v_only_where_a_layer_computes_its_own(keras_presets):
    """gemma route and keras route alike: layer 4 of the 5:1 shape keeps its own k/v (no
    unshared global before it) and gets k/v adapters; layer 5 reads layer 3's and gets none."""
    import jax

    from adapters_lib import lora
    from adapters_lib.catalog import resolve
    from adapters_lib.config import LoraSpec
    from adapters_lib.keras_route.model import build_model
    from adapters_lib.models import families

    folder = keras_presets("gemma4-e-window5")
    arch = resolve(str(folder)).arch
    assert arch.shared_kv() == (5,) and arch.kv_sources() == {5: 3}
    spec = LoraSpec(rank=2, alpha=4.0, targets=tuple(TARGETS))
    model = families.model_class(arch)()
    made = jax.tree_util.tree_flatten_with_path(jax.eval_shape(
        lambda r: lora.init_lora(model, spec, None, r), jax.random.key(0)))[0]
    kv = {p[0].key for p, _ in made if p[2].key == "kv_einsum"}
    assert kv == {"layer_0", "layer_1", "layer_2", "layer_3", "layer_4"}
    cfg = keras_g4_config(folder, mesh={"data": 1, "tensor": 1, "devices": 1},
                          lora={"rank": 2, "alpha": 4, "targets": TARGETS})
    paths = [v.path for v in build_model(cfg, None).causal_lm.trainable_variables]
    assert {p.split("/")[0] for p in paths if "/key/lora" in p} == {f"decoder_block_{i}" for i in range(5)}


@pytest.fixture(scope="module")
def e_runs(keras_presets, tmp_path_factory):
    """route → (RunDir, TrainResult): 3 LoRA steps on the 7-layer preset, every target, an eval
    after each (the same held-out batch)."""
    from fixtures_runs import demo_overrides

    from adapters_lib import runs
    from adapters_lib.config import load_config
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.keras_route import run_keras_training
    from adapters_lib.train.loop import run_training

    folder = keras_presets("gemma4-e-window3")
    root = tmp_path_factory.mktemp("e-runs")
    cfg = load_config(None, demo_overrides(run__name='"e-gemma"', run__dir=f'"{root}"', model__source=f'"{folder}"',
                                           lora__targets=json.dumps(TARGETS), train__steps=3, train__eval_every=1,
                                           train__checkpoint_every=3, train__learning_rate=0.02,
                                           train__batch_size=4, data__max_length=32))
    gemma_run = runs.create_run(cfg)
    out = {"gemma": (gemma_run, run_training(cfg, gemma_run, hooks=default_hooks))}
    kcfg = keras_g4_config(folder, mesh={"data": 1, "tensor": 1, "devices": 1},
                           lora={"rank": 4, "alpha": 8, "targets": TARGETS},
                           train={"steps": 3, "eval_every": 1, "checkpoint_every": 3, "eval_exact_match": 0,
                                  "learning_rate": 0.02})
    keras_run = runs.create_run(kcfg, root=root)
    out["keras"] = (keras_run, run_keras_training(kcfg, keras_run, hooks=default_hooks))
    return out


@pytest.mark.parametrize("route", ["gemma", "keras"])
def test_lora_trains_and_compare_answers_on_both_routes(e_runs, route, capsys):
    from workbench.cli import main

    run, result = e_runs[route]
    assert result.state == "completed", result
    losses = [m["loss"] for m in run.metrics() if "loss" in m]
    evals = [m["eval_loss"] for m in run.metrics() if "eval_loss" in m]
    assert len(losses) == 3 and len(evals) == 3 and evals[-1] < evals[0]
    code = main(["compare", "--in-process", "--run", str(run.path), "--prompt", "apple river stone",
                 "--prompt", "Is 7 even or odd?", "--json", "--max-new-tokens", "8"])
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in results] == [3, 3]
    assert results[0]["settings"].get("backend", "gemma") == route
    assert any(r["base"] != r["tuned"] for r in results)



def test_remat_runs_the_librarys_own_loop_through_the_shared_layers(gemma4_tiny):
    """``train.remat`` on Gemma 4: each block rematerialised inside gemma's loop (per-layer
    inputs, KV-shared layers reading their source): the loss and every gradient are the plain
    model's (it had raised on the E-model: the blocks were called without per-layer inputs)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.train.variants import with_remat

    for kind in ("dense", "e"):
        _, model, params = gemma4_tiny[kind]
        tokens = jnp.asarray(np.random.default_rng(0).integers(3, 1024, (1, 12)), jnp.int32)

        def loss(p, m, tokens=tokens):
            return jnp.mean(m.apply({"params": p}, tokens).logits ** 2)

        remat = with_remat(model)
        # jitted, as a train step is (eager, gemma's blocks and the glue between them compiled
        # one by one): the plain and the rematerialised gradient side by side in one program,
        # traced once (its jaxpr holds the remat) and compiled once
        both = jax.jit(lambda p, model=model, remat=remat: (jax.value_and_grad(loss)(p, model),
                                                            jax.value_and_grad(loss)(p, remat)))
        traced = both.trace(params)
        assert "remat" in str(traced.jaxpr)
        (want, want_g), (got, got_g) = traced.lower().compile()(params)
        assert float(got) == pytest.approx(float(want), rel=1e-6)
        for a, b in zip(jax.tree.leaves(want_g), jax.tree.leaves(got_g), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6)
