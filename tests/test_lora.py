"""Targeted LoRA: only the chosen targets get adapters, scaled by alpha/rank, B = 0 at start."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters_lib.config import LORA_TARGETS, LoraSpec
from adapters_lib.lora import einsum as lora_einsum
from adapters_lib.lora import fuse as lora_fuse
from adapters_lib.lora import targeted as lora
from adapters_lib.lora import traced_shapes
from adapters_lib.models import demo

TARGET_SETS = [(t,) for t in LORA_TARGETS] + [("q", "v"), ("gate", "up", "down"), LORA_TARGETS]


def _two_layer_config(config):
    """The config's first two layers (one local, one global): every target's adapter is wired
    the same way in each layer, and the file's ~25 model programs unroll half the layers."""
    import dataclasses

    config = dataclasses.replace(config, attention_types=config.attention_types[:2])
    assert len(set(config.attention_types)) == 2
    return config


@pytest.fixture(scope="module")
def base():
    """The demo's first two layers with the demo's own weights."""
    model = demo.demo_model_class()(config=_two_layer_config(demo.demo_transformer_config()), dtype=jnp.float32)
    params = {k: v for k, v in demo.demo_params().items() if k not in ("layer_2", "layer_3")}
    tokens = jnp.asarray(np.random.RandomState(0).randint(4, 1000, (2, 16)), jnp.int32)
    logits = model.apply({"params": params}, tokens).logits
    return model, params, tokens, logits


def _perturbed(adapters, seed=2):
    leaves, tree = jax.tree.flatten(adapters)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [x + 0.02 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)])


@pytest.mark.parametrize("targets", TARGET_SETS, ids=lambda t: "+".join(t))
def test_adapters_match_closed_form_count_start_at_base_and_fuse_exactly(base, targets):
    model, params, tokens, ref = base
    spec = LoraSpec(rank=4, alpha=8.0, targets=targets)
    adapters = traced_shapes.init_lora(model, spec, params, jax.random.key(1))

    # only the chosen targets carry adapters, and their count is the closed form
    found = {a.target for a in lora_fuse.iter_adapters(adapters)}
    assert found == set(targets)
    assert lora.count_params(adapters) == lora.expected_lora_params(model.config, spec)

    wrapped = lora.wrap(model, spec)
    at_start = wrapped.apply({"params": lora.merge_lora(params, adapters)}, tokens).logits
    np.testing.assert_array_equal(np.asarray(at_start), np.asarray(ref))  # B = 0 → the base model

    moved = lora.merge_lora(params, _perturbed(adapters))
    tuned = wrapped.apply({"params": moved}, tokens).logits
    assert float(jnp.max(jnp.abs(tuned - ref))) > 1e-3  # the adapters act
    fused = lora_fuse.fuse_lora(jax.device_get(moved), spec)
    merged_logits = model.apply({"params": fused}, tokens).logits
    np.testing.assert_allclose(np.asarray(merged_logits), np.asarray(tuned), rtol=1e-5, atol=1e-5)


def test_update_is_scaled_by_alpha_over_rank(base):
    model, params, tokens, ref = base
    small = LoraSpec(rank=4, alpha=4.0, targets=("down",))
    big = LoraSpec(rank=4, alpha=8.0, targets=("down",))
    adapters = _perturbed(traced_shapes.init_lora(model, small, params, jax.random.key(1)))
    fused_small = lora_fuse.fuse_lora(jax.device_get(lora.merge_lora(params, adapters)), small)
    fused_big = lora_fuse.fuse_lora(jax.device_get(lora.merge_lora(params, adapters)), big)
    w0 = np.asarray(params["layer_0"]["mlp"]["linear"])
    d_small = fused_small["layer_0"]["mlp"]["linear"] - w0
    d_big = fused_big["layer_0"]["mlp"]["linear"] - w0
    np.testing.assert_allclose(d_big, 2.0 * d_small, rtol=1e-5, atol=1e-7)


def test_split_and_merge_are_inverse_and_leave_no_empty_branches(base):
    model, params, _, _ = base
    spec = LoraSpec(rank=2, alpha=2.0, targets=LORA_TARGETS)
    adapters = traced_shapes.init_lora(model, spec, params, jax.random.key(0))
    merged = lora.merge_lora(params, adapters)
    b, a = lora.split_lora(merged)
    assert jax.tree.structure(b) == jax.tree.structure(params)
    assert jax.tree.structure(a) == jax.tree.structure(adapters)


def test_two_specs_on_one_model_do_not_share_a_trace(base):
    # gemma's Transformer.__call__ is an nn.jit keyed on the module: without a per-spec
    # subclass the second spec would silently reuse the first one's interceptor.
    model, params, _, _ = base
    first = traced_shapes.init_lora(model, LoraSpec(rank=2, targets=("q",)), params, jax.random.key(0))
    second = traced_shapes.init_lora(model, LoraSpec(rank=2, targets=("down",)), params, jax.random.key(0))
    assert {a.target for a in lora_fuse.iter_adapters(first)} == {"q"}
    assert {a.target for a in lora_fuse.iter_adapters(second)} == {"down"}


def test_adapter_dtype_follows_the_spec(base):
    model, params, _, _ = base
    adapters = traced_shapes.init_lora(model, LoraSpec(rank=2, targets=("q",), dtype="bfloat16"), params,
                                       jax.random.key(0))
    assert {x.dtype for x in jax.tree.leaves(adapters)} == {jnp.dtype("bfloat16")}


def _plain_lora_matmul(x, a, b, scale):
    return ((x @ a) * jnp.asarray(scale, x.dtype)) @ b


def test_lora_matmul_backward_equals_autodiff():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 3, 5, 16)), jnp.float32)
    a = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(4, 24)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(2, 3, 5, 24)), jnp.float32)

    def loss(fn):
        return lambda x, a, b: jnp.sum(fn(x, a, b, 0.5) * w)

    # jitted: one program each (op by op, each primitive of the backward compiled on its own)
    ours = jax.jit(jax.grad(loss(lora_einsum.lora_matmul), argnums=(0, 1, 2)))(x, a, b)
    plain = jax.jit(jax.grad(loss(_plain_lora_matmul), argnums=(0, 1, 2)))(x, a, b)
    np.testing.assert_allclose(np.asarray(lora_einsum.lora_matmul(x, a, b, 0.5)),
                               np.asarray(_plain_lora_matmul(x, a, b, 0.5)), rtol=1e-5, atol=1e-5)
    for g, p in zip(ours, plain, strict=True):
        assert g.shape == p.shape
        np.testing.assert_allclose(np.asarray(g), np.asarray(p), rtol=1e-5, atol=1e-4)


def test_adapter_gradients_through_the_model_equal_plain_autodiff(base, monkeypatch):
    # the shared-A / block-diagonal-B form (k+v, gate+up) and the custom backward give the
    # same gradients as separate per-target products differentiated by JAX
    model, params, tokens, _ = base
    spec = LoraSpec(rank=4, alpha=8.0, targets=LORA_TARGETS)
    adapters = _perturbed(traced_shapes.init_lora(model, spec, params, jax.random.key(1)))
    weights = jax.random.normal(jax.random.key(3), (*tokens.shape, model.config.num_embed))

    def grads():
        wrapped = lora.wrap(model, spec)

        def loss(ad, params, tokens, weights):
            return jnp.sum(wrapped.apply({"params": lora.merge_lora(params, ad)}, tokens).logits * weights)
        return jax.jit(jax.grad(loss))(adapters, params, tokens, weights)  # one program, not one a primitive

    ours = grads()
    lora._traced_class.cache_clear()  # a fresh trace for the plain path
    monkeypatch.setattr(lora_einsum, "lora_matmul", _plain_lora_matmul)
    plain = grads()
    lora._traced_class.cache_clear()
    for (path, g), p in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(p), rtol=2e-4, atol=2e-4,
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("targets", [("q",), ("v",), ("q", "k", "v"), ("k", "o", "up")], ids="+".join)
def test_fused_slots_on_a_qkv_einsum_model_match_fused_weights(targets):
    # num_kv_heads == num_heads: gemma uses one qkv_einsum (3 slots); the shared-A product must
    # put each target's update in its own slot
    import dataclasses

    config = dataclasses.replace(_two_layer_config(demo.demo_transformer_config()), num_kv_heads=4)
    model = demo.demo_model_class()(config=config, dtype=jnp.float32)
    tokens = jnp.asarray(np.random.RandomState(0).randint(4, 1000, (2, 16)), jnp.int32)
    params = model.init(jax.random.key(0), tokens)["params"]
    spec = LoraSpec(rank=4, alpha=8.0, targets=targets)
    moved = lora.merge_lora(params, _perturbed(traced_shapes.init_lora(model, spec, params, jax.random.key(1))))
    tuned = lora.wrap(model, spec).apply({"params": moved}, tokens).logits
    fused = model.apply({"params": lora_fuse.fuse_lora(jax.device_get(moved), spec)}, tokens).logits
    base = model.apply({"params": params}, tokens).logits
    assert float(jnp.max(jnp.abs(tuned - base))) > 1e-3
    np.testing.assert_allclose(np.asarray(fused), np.asarray(tuned), rtol=1e-5, atol=1e-5)


def assert_rank_derived_shapes_are_traced_shapes(model, targets) -> None:
    """The adapters' shapes for a rank, derived from the one trace at ``PROBE_RANK``, are the
    shapes a trace at that rank gives (a rank tweak traces nothing)."""
    import dataclasses

    for rank in (1, 3, 16):
        spec = LoraSpec(rank=rank, alpha=2.0 * rank, targets=tuple(targets))
        derived = traced_shapes._adapter_shapes.__wrapped__(model, spec)
        traced = traced_shapes._traced_shapes.__wrapped__(model, dataclasses.replace(spec, alpha=1.0))
        assert derived[1] == traced[1]
        assert [(p, tuple(x.shape)) for p, x in derived[0]] == [(p, tuple(x.shape)) for p, x in traced[0]]


@pytest.mark.parametrize("targets", [LORA_TARGETS, ("q", "v")], ids=lambda t: "+".join(t))
def test_a_rank_tweak_derives_the_adapter_shapes_without_a_trace(base, targets):
    assert_rank_derived_shapes_are_traced_shapes(base[0], targets)
    spec = LoraSpec(rank=5, targets=tuple(targets))
    traced_shapes._adapter_shapes.cache_clear()
    traced_shapes._adapter_shapes(base[0], LoraSpec(rank=6, alpha=1.0, targets=tuple(targets)))  # the probe traced once
    before = traced_shapes._traced_shapes.cache_info().misses
    traced_shapes._adapter_shapes(base[0], spec)
    assert traced_shapes._traced_shapes.cache_info().misses == before


SUBSETS = [("q",), ("v",), ("k", "v"), ("q", "v"), ("gate", "down"), ("up",), ("o", "up", "down")]


def assert_subset_shapes_are_traced_shapes(model, subsets=SUBSETS, extra=()) -> None:
    """A targets subset's adapters, kept from the one trace of every target
    (``lora.family.subset``), are the paths, shapes and tree of a trace of the subset alone."""
    import dataclasses

    for targets in subsets:
        spec = LoraSpec(rank=3, alpha=6.0, targets=(*targets, *extra))
        derived = traced_shapes._adapter_shapes.__wrapped__(model, spec)
        traced = traced_shapes._traced_shapes.__wrapped__(model, dataclasses.replace(spec, alpha=1.0))
        assert derived[1] == traced[1], targets
        assert [(p, tuple(x.shape)) for p, x in derived[0]] == [(p, tuple(x.shape)) for p, x in traced[0]]


def test_a_targets_subset_keeps_the_traced_shapes_of_local_and_global_layers(base):
    assert_subset_shapes_are_traced_shapes(base[0])


def test_a_targets_subset_of_a_gemma3_config_keeps_the_traced_shapes():
    # the Gemma-3-1B config (4 query heads on 1 k/v head: a kv_einsum) cut to one local and one
    # global layer; abstract only, no weights
    import dataclasses

    from gemma import gm

    config = gm.nn.Gemma3_1B.config
    kinds = sorted(set(config.attention_types), key=str)
    model = gm.nn.Gemma3_1B(config=dataclasses.replace(config, attention_types=tuple(kinds)))
    assert len(kinds) == 2
    assert_subset_shapes_are_traced_shapes(model, [("q", "v"), ("k", "gate", "down")])


def test_a_targets_or_rank_tweak_traces_and_compiles_nothing(base):
    from forbid_compile import forbid_compiles

    model = base[0]
    keys = [jax.random.key(s) for s in (0, 1, 2)]
    traced_shapes.init_lora(model, LoraSpec(rank=4, targets=LORA_TARGETS), None, keys[0])  # the one trace
    with forbid_compiles():
        for spec, key in [(LoraSpec(rank=11, alpha=3.0, targets=("q", "v")), keys[1]),
                          (LoraSpec(rank=37, targets=("k", "o", "down"), dtype="bfloat16"), keys[2])]:
            made = traced_shapes.init_lora(model, spec, None, key)
            assert {a.target for a in lora_fuse.iter_adapters(made)} == set(spec.targets)
            assert lora.count_params(made) == lora.expected_lora_params(model.config, spec)
            assert {x.dtype for x in jax.tree.leaves(made)} == {jnp.dtype(spec.dtype)}
