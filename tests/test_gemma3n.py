"""Gemma 3n on the gemma route: the family record against the library, HF both ways (the padded
embedding trimmed, the KV-shared layers' k/v not read), orbax, LoRA on its real modules."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from adapters_lib.models import families
from adapters_lib.models.families import gemma3n


def _flat(tree) -> dict[tuple[str, ...], np.ndarray]:
    import jax

    return {tuple(k.key for k in p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


_FORWARD: dict[int, object] = {}


def _logits(model, params, tokens):
    """The model's logits, one compiled forward per model (reused across the calls)."""
    import jax

    forward = _FORWARD.setdefault(id(model), jax.jit(lambda p, t: model.apply({"params": p}, t).logits))
    return np.asarray(forward(params, tokens))


def test_known_sizes_mirror_the_library_configs():
    from gemma import gm

    for size, (name, arch) in gemma3n.KNOWN.items():
        ref = dataclasses.replace(getattr(gm.nn, name).config, vision_encoder=None)
        ours = arch.transformer_config()
        for field in dataclasses.fields(ref):
            assert getattr(ours, field.name) == getattr(ref, field.name), (size, field.name)
        assert arch.param_count() > arch.effective_params()  # the per-layer table counts, not computes
    e2b = gemma3n.KNOWN["e2b"][1]
    assert e2b.kv_sources() == {i: 19 if (i + 1) % 5 == 0 else 18 for i in range(20, 30)}
    e4b = gemma3n.KNOWN["e4b"][1]
    assert e4b.kv_sources() == {i: 19 if (i + 1) % 5 == 0 else 18 for i in range(20, 35)}


def test_family_shapes_and_hf_round_trip_are_the_librarys(gemma3n_tiny, tmp_path):
    from adapters_lib.models.hf import hf_convert, hf_layout, safetensors_io

    arch, model, params = gemma3n_tiny
    assert gemma3n.arch_from_config(model.config) == arch
    assert {k: tuple(v.shape) for k, v in _flat(params).items()} == \
        dict(gemma3n.param_shapes(arch.transformer_config_fields()))
    assert ("layer_2", "attn", "kv_einsum", "w") not in _flat(params)  # KV-shared: no k/v of its own
    hf = hf_convert.gemma_to_hf(params, arch=arch)
    assert {k: v.shape for k, v in hf.items()} == hf_layout.hf_shapes(arch)
    assert hf["model.embed_tokens.weight"].shape == (1024 + 256, 32)  # HF's multimodal rows, zeros
    back = _flat(hf_convert.hf_to_gemma(hf, arch))
    assert all(np.array_equal(v, back[k]) for k, v in _flat(params).items())
    assert families.from_hf_config(json.loads(json.dumps(families.hf_config_for(arch)))) == arch
    hf_convert.export_hf(tmp_path, params, model.config, "gemma3n")  # the merged export
    folder = safetensors_io.SafetensorsDir(tmp_path)
    reread = _flat(hf_convert.hf_to_gemma({n: folder.get(n) for n in folder.where}, arch))
    assert all(np.array_equal(v, reread[k]) for k, v in _flat(params).items())


def test_multimodal_hf_folder_loads_the_text_tower(gemma3n_tiny, tmp_path):
    """Laid out as transformers' Gemma3nForConditionalGeneration saves it (``model.language_model.``,
    towers, the KV-shared layers' k/v dropped, 256 rows past the text vocabulary): the catalog
    lists the family and its towers, the loader gives the library's logits."""
    import jax.numpy as jnp

    from adapters_lib.models import weights
    from adapters_lib.models.hf import hf_convert

    arch, model, params = gemma3n_tiny
    tensors = {}
    for name, value in hf_convert.gemma_to_hf(params, arch=arch).items():
        parts = name.split(".")
        if parts[1] == "layers" and int(parts[2]) in arch.shared_kv() and parts[-2] in ("k_proj", "v_proj", "k_norm"):
            continue
        tensors["model.language_model." + name[len("model."):]] = value
    tensors["model.language_model.embed_tokens.weight"][1024:] = 7.0  # multimodal rows: never read
    tensors["model.vision_tower.timm_model.conv_stem.weight"] = np.zeros((4, 4), np.float32)
    config = {"architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n",
              "text_config": families.hf_config_for(arch), "vision_config": {"hidden_size": 4},
              "audio_config": {"hidden_size": 4}}
    hf_convert.save_hf(tmp_path, tensors, config)
    read = families.from_hf_config(json.loads((tmp_path / "config.json").read_text()))
    assert read.towers == ("vision", "audio")
    assert dataclasses.replace(read, towers=()) == arch
    loaded = weights.load_hf_params(tmp_path, read, "float32", None)
    assert set(_flat(loaded)) == set(_flat(params))
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 256, (2, 15)), jnp.int32)
    np.testing.assert_allclose(_logits(model, loaded, tokens), _logits(model, params, tokens), atol=1e-5)


def test_lora_targets_the_real_modules_and_lowers_the_loss(gemma3n_tiny):
    """q/k/v/o and gate/up/down get adapters, none on the KV-shared layers' k/v (they have no k/v
    projection) nor on AltUp, Laurel or the per-layer inputs; the estimate's shapes are
    ``init_lora``'s; a few steps lower the loss; the fused weights give the adapted loss."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.lora import fuse as lora_fuse

    arch, model, params = gemma3n_tiny
    spec = LoraSpec(rank=2, alpha=4.0, targets=("q", "k", "v", "o", "gate", "up", "down"))
    adapters = lora.init_lora(model, spec, None, jax.random.key(0))
    names = {"/".join(k) for k in _flat(adapters)}
    assert "layer_1/attn/kv_einsum/lora/k_a" in names and "layer_3/attn/q_einsum/lora/q_a" in names
    assert not any(n.startswith(("layer_2/attn/kv_einsum", "layer_3/attn/kv_einsum")) for n in names)
    assert not any(x in n for n in names for x in ("altup", "laurel", "per_layer"))
    assert {"/".join(p): s for p, s in gemma3n.lora_shapes(model.config, 2, spec.targets)} == \
        {"/".join(k): tuple(v.shape) for k, v in _flat(adapters).items()}
    assert lora.expected_lora_params(model.config, spec) == lora.count_params(adapters)
    wrapped = lora.wrap(model, spec)
    tokens = jnp.asarray(np.random.default_rng(3).integers(1, 256, (2, 16)), jnp.int32)

    def loss(ad):
        logits = wrapped.apply({"params": lora.merge_lora(params, ad)}, tokens[:, :-1]).logits
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1))

    step = jax.jit(jax.value_and_grad(loss))
    first, grads = step(adapters)
    assert float(jnp.abs(_flat(grads)[("layer_1", "attn", "kv_einsum", "lora", "v_b")]).sum()) > 0
    ad = adapters
    for _ in range(4):
        _, grads = step(ad)
        ad = jax.tree.map(lambda p, d: p - 0.5 * d, ad, grads)
    assert float(step(ad)[0]) < float(first)
    fused = lora_fuse.fuse_lora(lora.merge_lora(params, jax.tree.map(np.asarray, ad)), spec)
    logits = _logits(model, fused, tokens[:, :-1])  # the plain model on the fused weights
    plain = -np.mean(np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), np.asarray(tokens)[:, 1:, None], -1))
    assert plain == pytest.approx(float(step(ad)[0]), rel=1e-5)


def test_an_orbax_checkpoint_with_its_config_is_listed_and_loads(gemma3n_tiny, tmp_path):
    from gemma import gm

    from adapters_lib import catalog
    from adapters_lib.models import weights

    arch, model, params = gemma3n_tiny
    folder = tmp_path / "gemma-3n-tiny"
    gm.ckpts.save_params(dict(params), folder / "ckpt", wait_until_finished=True)
    (folder / "config.json").write_text(json.dumps(families.hf_config_for(arch)))
    entry = next(e for e in catalog.list_models([str(folder)]) if e.path == str(folder))
    assert (entry.family, entry.arch) == ("gemma3n", arch)
    assert entry.params_effective == arch.effective_params() < entry.params
    loaded = weights.load_orbax_params(folder / "ckpt", arch, "float32", None)
    assert all(np.array_equal(np.asarray(v), _flat(loaded)[k]) for k, v in _flat(params).items())
    with pytest.raises(families.ArchError, match="no known size"):
        gemma3n.from_shapes({"/".join(k): v.shape for k, v in _flat(params).items()})
    from adapters_lib.config import ModelSpec
    from adapters_lib.errors import WorkbenchError
    from adapters_lib.models.loader import load_model

    with pytest.raises(WorkbenchError) as e:  # its layers do not read a quantized base yet
        load_model(ModelSpec(source=str(folder), quantize="int8"))
    assert "Gemma 3n base cannot be held quantized" in str(e.value) and "\n" not in str(e.value)


def test_a_rank_tweak_derives_the_adapter_shapes_of_gemma3n(gemma3n_tiny):
    from test_lora import (
        assert_rank_derived_shapes_are_traced_shapes,
        assert_subset_shapes_are_traced_shapes,
    )

    assert_rank_derived_shapes_are_traced_shapes(gemma3n_tiny[1], ("q", "k", "v", "o", "gate", "up", "down"))
    assert_subset_shapes_are_traced_shapes(gemma3n_tiny[1], [("k", "v"), ("q", "down")])
