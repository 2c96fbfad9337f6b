"""Gemma 4 on the gemma route: the family record against the library, HF both ways, loading,
LoRA on its real modules (k=v layers, the shared MLP, the expert bank; none on KV-shared k/v)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from adapters_lib.models import families
from adapters_lib.models.families import gemma4


def _flat(tree) -> dict[tuple[str, ...], np.ndarray]:
    import jax

    return {tuple(k.key for k in p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _first_two_layers(tiny):
    """A tiny model's first two layers (a local one, a global one), its own weights: what a
    check reads in every layer alike (LoRA on the expert bank, its split over a mesh) is there,
    and each program unrolls half the layers. Not for the KV-shared E-style model."""
    import jax.numpy as jnp

    arch, _, params = tiny
    arch = dataclasses.replace(arch, num_layers=2, attention=arch.attention[:2])
    assert arch.attention == ("local", "global") and not arch.shared_kv()
    params = {k: v for k, v in params.items() if k not in ("layer_2", "layer_3")}
    return arch, families.model_class(arch)(dtype=jnp.float32), params


def test_known_sizes_mirror_the_library_configs():
    from gemma import gm

    for size, (name, arch) in gemma4.KNOWN.items():
        ref = dataclasses.replace(getattr(gm.nn, name).config, vision_encoder=None, audio_encoder=None)
        ours = arch.transformer_config()
        for field in dataclasses.fields(ref):
            if field.name == "use_bidirectional_attention":  # image tokens only: text has none
                continue
            assert getattr(ours, field.name) == getattr(ref, field.name), (size, field.name)
    e2b = gemma4.KNOWN["e2b"][1]
    assert e2b.param_count() > e2b.effective_params()  # the per-layer table counts, not computes
    moe = gemma4.KNOWN["26b-a4b"][1]
    assert moe.active_params() < moe.param_count() / 3


def test_kv_shared_layers_read_the_same_layers_as_in_transformers_and_gemma():
    """On the real E2B/E4B patterns the one rule (``arch.kv_sources``: the last unshared layer of
    the same kind, keras-hub's and transformers') names the layers gemma's own rule does (global:
    the last unshared layer, local: the one before), and the model runs it; a config.json where
    the two part loads (tests/test_gemma4_kv_sharing.py checks it against keras-hub)."""
    from gemma.gm.nn.gemma4 import _config

    e2b, e4b = gemma4.KNOWN["e2b"][1], gemma4.KNOWN["e4b"][1]
    assert e2b.kv_sources() == {i: 14 if e2b.attention[i] == "global" else 13 for i in range(15, 35)}
    assert e4b.kv_sources() == {i: 23 if e4b.attention[i] == "global" else 22 for i in range(24, 42)}
    for arch in (e2b, e4b):
        config = arch.transformer_config()
        gemmas = _config.create_kv_cache_sharing_patterns(config.kv_cache_sharing_config, arch.num_layers,
                                                          config.attention_types)
        assert tuple(gemmas) == arch.kv_reads()
    from fixtures_gemma4 import tiny_arch

    parted = dataclasses.replace(tiny_arch("e"), attention=("global", "local", "local", "global"))
    read = families.from_hf_config(families.hf_config_for(parted))
    assert read == parted and read.kv_sources() == {2: 1, 3: 0}


@pytest.mark.parametrize("kind", ["dense", "moe", "e"])
def test_family_shapes_and_hf_round_trip_are_the_librarys(gemma4_tiny, kind, tmp_path):
    from adapters_lib.models.hf import hf_convert, hf_layout, safetensors_io

    arch, model, params = gemma4_tiny[kind]
    assert gemma4.arch_from_config(model.config) == arch  # what an export reads back
    ours = dict(gemma4.param_shapes(arch.transformer_config_fields()))
    assert {k: tuple(v.shape) for k, v in _flat(params).items()} == ours
    hf = hf_convert.gemma_to_hf(params, arch=arch)
    assert {k: v.shape for k, v in hf.items()} == hf_layout.hf_shapes(arch)
    back = _flat(hf_convert.hf_to_gemma(hf, arch))
    assert all(np.array_equal(v, back[k]) for k, v in _flat(params).items())
    assert families.from_hf_config(json.loads(json.dumps(families.hf_config_for(arch)))) == arch
    files = hf_convert.export_hf(tmp_path / kind, params, model.config, "gemma4")  # the merged export
    folder = safetensors_io.SafetensorsDir(tmp_path / kind)
    reread = hf_convert.hf_to_gemma({n: folder.get(n) for n in folder.where}, arch)
    assert files and all(np.array_equal(v, _flat(reread)[k]) for k, v in _flat(params).items())


def test_multimodal_hf_folder_loads_the_text_tower_and_fills_dropped_kv(gemma4_tiny, tmp_path):
    """An E-style checkpoint laid out as transformers' Gemma4ForConditionalGeneration saves it
    (``model.language_model.``, a vision tower, the KV-shared layers' k/v dropped) loads into
    the library's tree and gives the library's logits."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models import weights
    from adapters_lib.models.hf import hf_convert

    arch, model, params = gemma4_tiny["e"]
    hf = hf_convert.gemma_to_hf(params, arch=arch)
    shared = arch.shared_kv()
    assert shared == (2, 3)
    tensors = {}
    for name, value in hf.items():
        layer = name.split(".")[2] if name.startswith("model.layers.") else ""
        if layer.isdigit() and int(layer) in shared and name.endswith(("k_proj.weight", "v_proj.weight",
                                                                        "k_norm.weight")):
            continue
        tensors["model.language_model." + name[len("model."):]] = value
    tensors["model.vision_tower.patch.weight"] = np.zeros((4, 4), np.float32)
    config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
              "text_config": families.hf_config_for(arch), "vision_config": {"hidden_size": 4}}
    hf_convert.save_hf(tmp_path, tensors, config)
    read = families.from_hf_config(json.loads((tmp_path / "config.json").read_text()))
    assert read.towers == ("vision",)
    assert dataclasses.replace(read, towers=()) == arch
    loaded = weights.load_hf_params(tmp_path, read, "float32", None)
    flat, want = _flat(loaded), _flat(params)
    assert set(flat) == set(want)
    assert np.all(np.asarray(flat[("layer_3", "attn", "kv_einsum", "w")]) == 0)  # filled, unused
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 256, (2, 12)), jnp.int32)
    forward = jax.jit(lambda p: model.apply({"params": p}, tokens).logits)
    # both as host arrays: one program (the loader's committed device arrays compiled it again)
    ref, got = forward(params), forward(jax.tree.map(np.asarray, loaded))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5)


def test_lora_targets_the_real_modules_and_trains_the_experts(gemma4_tiny):
    """MoE (its first two layers, ``_first_two_layers``): q/k(k_einsum)/v/o, the shared MLP and
    the expert bank get adapters, the router none; a few steps lower the loss and every expert
    adapter gets a non-zero gradient. E-style: no adapter on the KV-shared layers' k/v. The
    fused weights give the adapted logits."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.lora import fuse as lora_fuse

    e_arch, e_model, _ = gemma4_tiny["e"]
    spec = LoraSpec(rank=2, alpha=4.0, targets=("q", "k", "v", "o", "gate", "up", "down", "experts"))
    e_adapters = lora.init_lora(e_model, spec, None, jax.random.key(0))
    e_names = {"/".join(k) for k in _flat(e_adapters)}
    assert any(n.startswith("layer_1/attn/kv_einsum/lora/k_a") for n in e_names)
    assert not any(n.startswith(("layer_2/attn/kv_einsum", "layer_3/attn/kv_einsum")) for n in e_names)

    arch, model, params = _first_two_layers(gemma4_tiny["moe"])
    adapters = lora.init_lora(model, spec, None, jax.random.key(1))
    names = {"/".join(k) for k in _flat(adapters)}
    assert "layer_1/attn/k_einsum/lora/k_a" in names
    assert "layer_0/mlp/lora_experts_gate_a" in names
    assert "layer_0/mlp2/lora_gating_einsum/gate_a" in names
    assert not any("router" in n for n in names)
    for model_, ad_ in ((model, adapters), (e_model, e_adapters)):
        want = {"/".join(k): tuple(v.shape) for k, v in _flat(ad_).items()}
        ours = {"/".join(p): s for p, s in gemma4.lora_shapes(model_.config, 2, spec.targets)}
        assert ours == want  # the estimate's count is the adapters' own
    wrapped = lora.wrap(model, spec)
    rng = np.random.default_rng(3)
    tokens = jnp.asarray(rng.integers(1, 256, (2, 16)), jnp.int32)

    def loss(ad):
        logits = wrapped.apply({"params": lora.merge_lora(params, ad)}, tokens[:, :-1]).logits
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1)), logits

    step = jax.jit(jax.value_and_grad(loss, has_aux=True))  # the adapted logits too: no 2nd program
    (first, _), grads = step(adapters)
    g = _flat(grads)
    for name in ("lora_experts_gate_b", "lora_experts_up_b", "lora_experts_down_b"):
        assert float(jnp.abs(g[("layer_0", "mlp", name)]).sum()) > 0, name
    update = jax.jit(lambda ad, grads: jax.tree.map(lambda p, d: p - 0.5 * d, ad, grads))  # one program
    ad = adapters
    for _ in range(5):
        _, grads = step(ad)
        ad = update(ad, grads)
    (last, adapted), _ = step(ad)
    assert float(last) < float(first)
    fused = lora_fuse.fuse_lora(lora.merge_lora(params, jax.tree.map(np.asarray, ad)), spec)
    plain = jax.jit(lambda p: model.apply({"params": p}, tokens[:, :-1]).logits)(fused)
    np.testing.assert_allclose(np.asarray(plain), np.asarray(adapted), atol=2e-4)


def test_configures_live_trainable_count_is_the_familys(gemma4_tiny, gemma3n_tiny):
    """The engine's ``lora_per_rank`` (Configure's instant count, before an estimate) times the
    rank is the count of the adapters ``init_lora`` makes: Gemma 4's global layers, the expert
    bank, no k/v on KV-shared layers; Gemma 3n's too."""
    import jax

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.engine import compute
    from workbench.widgets.lora_form import trainable_count

    for arch, model, _ in (gemma4_tiny["moe"], gemma4_tiny["e"], gemma3n_tiny):
        per_rank = families.lora_per_rank(arch)
        assert ("experts" in per_rank) == (arch.family == "gemma4" and arch.moe)
        spec = LoraSpec(rank=3, alpha=6.0, targets=tuple(per_rank))
        made = lora.count_params(lora.init_lora(model, spec, None, jax.random.key(0)))
        assert trainable_count({"lora_per_rank": per_rank}, {"rank": 3, "targets": spec.targets}) == made

    from adapters_lib.catalog.entry import ModelEntry, set_arch

    entry = ModelEntry(id="tiny")  # as the catalog lists it: the engine's reply carries the counts
    set_arch(entry, gemma4_tiny["moe"][0])
    info = compute.model_info(entry)
    assert info.arch["lora_per_rank"] == families.lora_per_rank(gemma4_tiny["moe"][0])


def test_gemma4_template_keeps_a_system_turn_untrained_and_no_thinking():
    from adapters_lib.data import chat_template as ct

    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"}]
    pieces = ct.pieces(conv, markers=ct.GEMMA4_MARKERS)
    assert "".join(t for t, _, _ in pieces) == (
        "<|turn>system\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\nyo<turn|>\n")
    assert "".join(t for t, trained, _ in pieces if trained) == "yo<turn|>"
    assert families.family("gemma4").chat.stop_pieces[0] == "<turn|>"
    assert "<|think|>" not in ct.format_prompt(conv, markers=ct.GEMMA4_MARKERS)
    # Gemma 3 (and 3n) fold the system message into the first user turn, as before
    assert ct.render(conv).startswith("<start_of_turn>user\nBe brief.\n\nhi")


def test_a_4_device_step_with_the_experts_split_equals_1_device(gemma4_tiny):
    """On the MoE model's first two layers (``_first_two_layers``: the expert bank is split the
    same way in each)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora
    from adapters_lib import mesh as mesh_lib
    from adapters_lib.config import LoraSpec, MeshSpec

    arch, model, params = _first_two_layers(gemma4_tiny["moe"])
    spec = LoraSpec(rank=2, alpha=4.0, targets=("q", "k", "o", "down", "experts"))
    wrapped = lora.wrap(model, spec)
    adapters = jax.tree.map(lambda x: x + 0.01, lora.init_lora(model, spec, None, jax.random.key(2)))
    tokens = jnp.asarray(np.random.default_rng(4).integers(1, 256, (4, 16)), jnp.int32)

    def loss(ad, base, toks):
        logits = wrapped.apply({"params": lora.merge_lora(base, ad)}, toks[:, :-1]).logits
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), toks[:, 1:, None], -1))

    step = jax.jit(jax.value_and_grad(loss))
    want, want_g = step(adapters, params, tokens)
    mesh = mesh_lib.make_mesh(MeshSpec(data=1, fsdp=2, tensor=2), jax.devices()[:4])
    config = model.config
    base = jax.tree_util.tree_map_with_path(
        lambda p, x: jax.device_put(x, mesh_lib.param_sharding(mesh, p, x.shape, config=config)), params)
    bank = base["layer_0"]["mlp"]["gating_einsum"]["w"]
    assert bank.sharding.spec[0] == "fsdp" and bank.sharding.spec[2] == "tensor"  # experts split
    ad = jax.tree_util.tree_map_with_path(
        lambda p, x: jax.device_put(x, mesh_lib.param_sharding(mesh, p, x.shape, config=config)), adapters)
    got, got_g = step(ad, base, jax.device_put(tokens, mesh_lib.batch_sharding(mesh)))
    np.testing.assert_allclose(float(got), float(want), rtol=2e-6)
    for k, v in _flat(want_g).items():
        np.testing.assert_allclose(np.asarray(_flat(got_g)[k]), np.asarray(v), atol=2e-6, err_msg=str(k))


@pytest.mark.parametrize("kind", ["e", "moe"])
def test_a_rank_tweak_derives_the_adapter_shapes_of_gemma4(gemma4_tiny, kind):
    from test_lora import (
        SUBSETS,
        assert_rank_derived_shapes_are_traced_shapes,
        assert_subset_shapes_are_traced_shapes,
    )

    targets = ("q", "k", "v", "o", "gate", "up", "down") + (("experts",) if kind == "moe" else ())
    assert_rank_derived_shapes_are_traced_shapes(gemma4_tiny[kind][1], targets)
    # and a targets tweak keeps the leaves of the one trace (k=v global layers, KV-shared ones,
    # the expert bank with and without its neighbours)
    assert_subset_shapes_are_traced_shapes(gemma4_tiny[kind][1], SUBSETS[:4])
    if kind == "moe":
        assert_subset_shapes_are_traced_shapes(gemma4_tiny[kind][1], [(), ("v", "down")], extra=("experts",))
