"""Loading catalog entries: exact conversions, equal logits across layouts, sharding at load,
the entry's own reason on failure, and a loaded model that trains LoRA and samples."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures_weights import DEMO_ARCH, TINY_GEMMA2, tiny_params

from adapters_lib import catalog
from adapters_lib.config import LoraSpec, ModelSpec
from adapters_lib.errors import WorkbenchError
from adapters_lib.models import families
from adapters_lib.models.hf import hf_convert, hf_layout, safetensors_io
from adapters_lib.models.loader import load_model

TOKENS = jnp.array([[2, 105, 40, 41, 42, 43, 44, 106, 7, 8]], jnp.int32)


def _hf_random(arch, seed, dtype="float32"):
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(dtype)
            for name, shape in hf_layout.hf_shapes(arch).items()}


MHA = dataclasses.replace(TINY_GEMMA2, num_kv_heads=4, family="gemma3", use_qk_norm=True,
                          transpose_gating=True)


@pytest.mark.parametrize("arch", [DEMO_ARCH, TINY_GEMMA2, MHA], ids=["gemma3", "gemma2", "mha"])
def test_hf_to_gemma_to_hf_round_trip_is_bit_exact(arch):
    import ml_dtypes

    hf = _hf_random(arch, 0, ml_dtypes.bfloat16 if arch is DEMO_ARCH else "float32")
    tree = hf_convert.hf_to_gemma(hf, arch)
    shapes = {path: np.shape(node) for path, node in _leaves(tree)}
    assert shapes == hf_convert.gemma_shapes(arch)
    back = hf_convert.gemma_to_hf(tree, arch=arch)
    assert set(back) == set(hf)
    for name, value in hf.items():
        assert back[name].dtype == value.dtype and back[name].tobytes() == value.tobytes(), name


def _leaves(tree, prefix=()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def test_conversion_follows_hf_linear_layouts():
    """q_proj row block h of head n is q_einsum[n, :, h]; gate_proj is gating[0] (F, D)."""
    arch = DEMO_ARCH
    hf = _hf_random(arch, 1)
    tree = hf_convert.hf_to_gemma(hf, arch)
    q = hf["model.layers.0.self_attn.q_proj.weight"]  # (N·H, D)
    assert np.array_equal(tree["layer_0"]["attn"]["q_einsum"]["w"][2, :, 5], q[2 * 64 + 5])
    o = hf["model.layers.0.self_attn.o_proj.weight"]  # (D, N·H)
    assert np.array_equal(tree["layer_0"]["attn"]["attn_vec_einsum"]["w"][1, 3], o[:, 64 + 3])
    v = hf["model.layers.1.self_attn.v_proj.weight"]
    assert np.array_equal(tree["layer_1"]["attn"]["kv_einsum"]["w"][1, 0, :, 7], v[7])
    assert np.array_equal(tree["layer_0"]["mlp"]["gating_einsum"][0],
                          hf["model.layers.0.mlp.gate_proj.weight"])
    assert np.array_equal(tree["layer_0"]["mlp"]["linear"],
                          hf["model.layers.0.mlp.down_proj.weight"].T)


def test_exported_safetensors_read_with_the_safetensors_library(tmp_path):
    from safetensors.numpy import load_file

    tensors = hf_convert.gemma_to_hf(tiny_params(TINY_GEMMA2), arch=TINY_GEMMA2)
    files = hf_convert.save_hf(tmp_path, tensors, families.hf_config_for(TINY_GEMMA2),
                               max_shard_bytes=100_000)
    assert len(files) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    read = {}
    for f in files:
        read.update(load_file(f))
    assert set(read) == set(tensors)
    assert all(np.array_equal(read[k], tensors[k]) for k in tensors)
    arch = families.from_hf_config(families.hf_config_for(TINY_GEMMA2))
    # the gating layout is gemma's choice: a custom size loads transposed (Gemma 3's layout)
    assert arch == dataclasses.replace(TINY_GEMMA2, transpose_gating=True)


def test_saving_hf_over_an_earlier_sharded_export_leaves_only_the_new_weights(tmp_path):
    config = families.hf_config_for(TINY_GEMMA2)
    old = hf_convert.gemma_to_hf(tiny_params(TINY_GEMMA2), arch=TINY_GEMMA2)
    hf_convert.save_hf(tmp_path, old, config, max_shard_bytes=100_000)
    new = {k: v + 1 for k, v in old.items()}
    files = hf_convert.save_hf(tmp_path, new, config)
    assert files == [tmp_path / "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    name = "model.layers.0.self_attn.q_proj.weight"
    got = safetensors_io.read_tensor(files[0], safetensors_io.read_header(files[0]), name)
    assert np.array_equal(got, new[name])


def test_export_hf_folder_lists_and_loads_back(weights_env, tmp_path, monkeypatch):
    cfg = DEMO_ARCH.transformer_config()
    assert families.arch_from_transformer_config(cfg, "gemma3") == DEMO_ARCH
    assert families.hf_config_for(cfg, "gemma3") == families.hf_config_for(DEMO_ARCH)
    out = tmp_path / "export"
    hf_convert.export_hf(out, weights_env.params, cfg, "gemma3", dtype="bfloat16",
                         tokenizer=weights_env.tokenizer, max_shard_bytes=1_000_000)
    entry = catalog.resolve(str(out))
    assert (entry.status, entry.family, entry.format) == ("ok", "gemma3", "hf-safetensors")
    assert entry.params == DEMO_ARCH.param_count()
    header = safetensors_io.read_header(next(out.glob("*.safetensors")))
    assert {v["dtype"] for k, v in header.items() if not k.startswith("__")} == {"BF16"}


def _logits(loaded):
    return np.asarray(loaded.model.apply({"params": loaded.params}, TOKENS).logits)


def test_every_layout_loads_the_same_weights_and_logits(weights_cache):
    env = weights_cache
    names = ("ok_flat", "ok_nested", "hf_single", "hf_sharded", "folder_hf")
    loaded = {n: load_model(ModelSpec(source=env.ids[n])) for n in names}
    expect = jax.tree.map(np.asarray, env.params)
    for name, model in loaded.items():
        got = jax.tree.map(np.asarray, model.params)
        assert jax.tree.structure(got) == jax.tree.structure(expect), name
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expect), strict=False)), name
    ref = _logits(loaded["ok_flat"])
    assert ref.shape == (1, TOKENS.shape[1], 1024) and np.isfinite(ref).all()
    for name in names[1:]:
        assert np.array_equal(_logits(loaded[name]), ref), name
    assert loaded["hf_single"].tokenizer.encode("hello") == loaded["ok_flat"].tokenizer.encode("hello")


def test_gemma2_safetensors_load_into_a_gemma2_model(weights_cache):
    loaded = load_model(ModelSpec(source=weights_cache.ids["hf_gemma2"]))
    cfg = loaded.model.config
    assert loaded.family == "gemma2" and not cfg.use_qk_norm
    assert cfg.final_logit_softcap == 30.0 and cfg.attn_logits_soft_cap == 50.0
    # the fixture's own model (non-transposed gating, like Gemma 2 2B) gives the same logits
    own = families.model_class(TINY_GEMMA2)(dtype=jnp.float32)
    want = own.apply({"params": weights_cache.gemma2_params}, TOKENS).logits
    np.testing.assert_allclose(_logits(loaded), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert np.isfinite(want).all()


def test_params_are_placed_on_the_mesh_at_load_time(weights_cache):
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tensor"))

    def rule(path, sds):
        spec = [None] * len(sds.shape)
        if sds.shape[-1] % 4 == 0:
            spec[-1] = "tensor"
        return NamedSharding(mesh, PartitionSpec(*spec))

    for name in ("ok_flat", "hf_sharded"):
        loaded = load_model(ModelSpec(source=weights_cache.ids[name]), param_dtype="bfloat16",
                            sharding=rule)
        emb = loaded.params["embedder"]["input_embedding"]
        assert emb.dtype == jnp.bfloat16
        assert emb.sharding.spec == PartitionSpec(None, "tensor")
        assert len(emb.addressable_shards) == 8 and emb.addressable_shards[0].data.shape == (1024, 64)
        np.testing.assert_array_equal(
            np.asarray(emb, np.float32),
            np.asarray(jnp.asarray(weights_cache.params["embedder"]["input_embedding"], jnp.bfloat16),
                       np.float32))


@pytest.mark.parametrize("name", ["incomplete", "corrupt", "no_tokenizer", "odd_shapes", "hf_llama",
                                  "hf_truncated", "hf_partial", "keras_no_weights"])
def test_loading_a_broken_entry_raises_its_listed_reason(weights_cache, name):
    entry = catalog.resolve(weights_cache.ids[name])
    with pytest.raises(WorkbenchError) as err:
        load_model(ModelSpec(source=weights_cache.ids[name]))
    assert entry.reason in str(err.value) and entry.status in str(err.value)
    assert "\n" not in str(err.value)
    assert str(err.value).count("set [model] tokenizer") <= 1  # the advice said once


def test_a_complete_keras_preset_loads_on_the_gemma_route(weights_cache):
    loaded = load_model(ModelSpec(source=weights_cache.ids["keras"]))
    emb = loaded.params["embedder"]["input_embedding"]
    assert emb.shape == weights_cache.params["embedder"]["input_embedding"].shape
    assert loaded.tokenizer_path.endswith("gemma3_demo_keras/assets/tokenizer/vocabulary.spm")


def test_missing_tokenizer_is_fine_when_the_spec_names_one(weights_cache):
    spec = ModelSpec(source=weights_cache.ids["no_tokenizer"], tokenizer=str(weights_cache.tokenizer))
    loaded = load_model(spec)
    assert loaded.tokenizer_path == str(weights_cache.tokenizer)


def test_truncated_array_data_is_caught_by_the_listing_and_the_load(weights_env, tmp_path):
    import shutil

    src = weights_env.kaggle / "models/google/gemma-3/flax/gemma3-demo-it/1"
    dst = tmp_path / "gemma3-damaged"
    shutil.copytree(src, dst)
    for f in (dst / "gemma3-demo-it").rglob("d/*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[:64])
    entry = catalog.resolve(str(dst))
    assert entry.status == "unreadable" and "damaged" in entry.reason
    with pytest.raises(WorkbenchError, match="unreadable: orbax checkpoint data is damaged"):
        load_model(ModelSpec(source=str(dst)))


def test_loaded_model_trains_lora_and_samples(weights_cache):
    import optax

    from adapters_lib import lora

    loaded = load_model(ModelSpec(source=weights_cache.ids["hf_sharded"]))
    spec = LoraSpec(rank=4, alpha=8.0, targets=("q", "v", "down"))
    wrapped = lora.wrap(loaded.model, spec)
    tokens = jnp.tile(TOKENS, (2, 1))
    # adapter shapes from an abstract init (lora.init_lora compiles a full init: slow on CPU)
    abstract = jax.eval_shape(lambda r: wrapped.init(r, tokens)["params"], jax.random.key(0))
    _, shapes = lora.split_lora(abstract)
    rng = np.random.default_rng(0)
    adapters = jax.tree_util.tree_map_with_path(
        lambda path, s: jnp.zeros(s.shape, s.dtype) if str(path[-1].key).endswith("_b")
        else jnp.asarray(rng.standard_normal(s.shape) * 0.1, s.dtype), shapes)
    assert lora.count_params(adapters) == lora.expected_lora_params(loaded.config, spec)

    def loss_fn(ad):
        logits = wrapped.apply({"params": lora.merge_lora(loaded.params, ad)}, tokens[:, :-1]).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    opt = optax.adam(1e-2)
    state = opt.init(adapters)

    @jax.jit
    def step(ad, st):
        loss, grads = jax.value_and_grad(loss_fn)(ad)
        updates, st = opt.update(grads, st, ad)
        return optax.apply_updates(ad, updates), st, loss

    losses = []
    for _ in range(8):
        adapters, state, loss = step(adapters, state)
        losses.append(float(loss))
    assert losses[-1] < losses[0] / 2, losses

    params = lora.merge_lora(loaded.params, adapters)
    forward = jax.jit(lambda p, t: wrapped.apply({"params": p}, t).logits)
    seq = TOKENS[:, :8].at[:, 4:].set(0)
    for i in range(4, 8):  # greedy decoding; causal, so the zeros after i do not matter
        nxt = forward(params, seq)[0, i - 1].argmax(-1)
        seq = seq.at[0, i].set(nxt.astype(jnp.int32))
    assert np.array_equal(np.asarray(seq[0, 4:]), np.asarray(TOKENS[0, 4:8]))  # learned the sequence
    assert isinstance(loaded.tokenizer.decode(np.asarray(seq[0]).tolist()), str)


def test_multimodal_gemma3_safetensors_load_text_only(weights_env, tmp_path):
    tensors = hf_convert.gemma_to_hf(weights_env.params, arch=DEMO_ARCH)
    tensors = {"model.language_model." + k[len("model."):]: v for k, v in tensors.items()}
    tensors["model.vision_tower.vision_model.post_layernorm.weight"] = np.ones(8, np.float32)
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": families.hf_config_for(DEMO_ARCH), "vision_config": {}}
    hf_convert.save_hf(tmp_path, tensors, config)
    (tmp_path / "tokenizer.model").write_bytes(weights_env.tokenizer.read_bytes())
    entry = catalog.resolve(str(tmp_path))
    assert (entry.status, entry.family, entry.arch) == ("ok", "gemma3", DEMO_ARCH)
    loaded = load_model(ModelSpec(source=str(tmp_path)))
    got = jax.tree.leaves(jax.tree.map(np.asarray, loaded.params))
    assert all(np.array_equal(a, b) for a, b in zip(got, jax.tree.leaves(weights_env.params),
                                                     strict=True))


def test_orbax_of_an_unknown_size_loads_with_a_config_json_beside(weights_env, tmp_path):
    from fixtures_weights import write_orbax

    arch = dataclasses.replace(DEMO_ARCH, num_layers=3, attention=("local", "local", "global"))
    params = tiny_params(arch, seed=3)
    write_orbax(tmp_path / "ckpt", params, "flat")
    (tmp_path / "tokenizer.model").write_bytes(weights_env.tokenizer.read_bytes())
    assert catalog.resolve(str(tmp_path)).status == "unsupported"  # shapes alone: no known size
    (tmp_path / "config.json").write_text(json.dumps(families.hf_config_for(arch)))
    entry = catalog.resolve(str(tmp_path))
    assert (entry.status, entry.size, entry.arch) == ("ok", "custom", arch)
    loaded = load_model(ModelSpec(source=str(tmp_path)))
    assert loaded.config.num_layers == 3
    assert np.array_equal(np.asarray(loaded.params["layer_2"]["mlp"]["linear"]),
                          params["layer_2"]["mlp"]["linear"])
