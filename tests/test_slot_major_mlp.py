"""The feed-forward with gate and up slot-major (``train.variants.slot_major_mlp``, the train
step's default on a TPU; ``lora.einsum.SLOT_MAJOR``, ``kernels.lora_matmul.lora_matmul_slots``)
against gemma's own ``[B, T, 2, F]`` layout: the same logits and gradients, on the CPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from adapters_lib import mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.kernels.lora_matmul import lora_matmul_slots
from adapters_lib.lora import targeted as lora
from adapters_lib.lora import traced_shapes
from adapters_lib.models import demo as demo_lib
from adapters_lib.train import step as step_lib
from adapters_lib.train.variants import with_training_attention

ALL = ("q", "k", "v", "o", "gate", "up", "down")


@pytest.fixture(scope="module")
def two_layers():
    """The demo's first two layers (its local and its global one) with the demo's weights: the
    feed-forward and its adapters are the same in every layer, and the 8 programs below (a
    value-and-grad of the whole model each) unroll half the layers; the demo's own train step
    is compared below."""
    import dataclasses

    config = demo_lib.demo_transformer_config()
    config = dataclasses.replace(config, attention_types=config.attention_types[:2])
    assert len(set(config.attention_types)) == 2  # one local (sliding) layer, one global
    params = {k: v for k, v in demo_lib.demo_params().items() if k not in ("layer_2", "layer_3")}
    return demo_lib.demo_model_class()(config=config, dtype=jnp.float32), params


@pytest.mark.parametrize("targets", [ALL, ("gate",), ("up", "down"), ("q",)], ids="+".join)
def test_slot_major_feed_forward_equals_gemmas_layout_forward_and_backward(two_layers, targets):
    model, params = two_layers
    hidden = model.config.hidden_dim
    tokens = jnp.asarray(np.random.RandomState(0).randint(4, 1000, (2, 16)), jnp.int32)
    spec = LoraSpec(rank=4, alpha=8.0, targets=targets)
    adapters = traced_shapes.init_lora(model, spec, params, jax.random.key(1))
    leaves, tree = jax.tree.flatten(adapters)  # B ≠ 0: the updates act
    keys = jax.random.split(jax.random.key(2), len(leaves))
    adapters = jax.tree.unflatten(tree, [x + 0.02 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)])
    out = {}
    for slot_major in (False, True):
        wrapped = lora.wrap(with_training_attention(model, "blocked", None, False, slot_major), spec)

        # the weights and tokens are arguments, not constants closed over: 15 MB of constants
        # in each program made every compile (and its entry in the suite's compile cache) slower
        def loss(a, params, tokens, wrapped=wrapped):
            return jnp.mean(wrapped.apply({"params": lora.merge_lora(params, a)}, tokens).logits ** 2)

        # one trace: its jaxpr is read, then it is lowered and run (make_jaxpr traced it again)
        traced = jax.jit(jax.value_and_grad(loss)).trace(adapters, params, tokens)
        stacked = re.search(rf"[\[,]2,{hidden}\]", str(traced.jaxpr)) is not None  # an array [..., 2, F]
        out[slot_major] = (traced.lower().compile()(adapters, params, tokens), stacked)
    (ref, ref_grad), gemma_layout = out[False]
    (val, grad), stacked = out[True]
    assert gemma_layout and not stacked  # no [..., 2, F] array in the slot-major step, forward or backward
    np.testing.assert_allclose(float(val), float(ref), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)


def test_lora_matmul_slots_gradients_are_autodiffs():
    k = jax.random.split(jax.random.key(0), 6)
    x = jax.random.normal(k[0], (3, 5, 8))
    a = jax.random.normal(k[1], (8, 2 * 4))
    bs = (jax.random.normal(k[2], (4, 6)), jax.random.normal(k[3], (4, 7)))
    cts = (jax.random.normal(k[4], (3, 5, 6)), jax.random.normal(k[5], (3, 5, 7)))

    def plain(x, a, bs):
        u = x @ a * 0.5
        return u[..., :4] @ bs[0], u[..., 4:] @ bs[1]

    def weighted(fn):
        return lambda x, a, bs: sum(jnp.sum(o * c) for o, c in zip(fn(x, a, bs), cts, strict=True))

    # jitted: one program each (op by op, each primitive of the backward compiled on its own)
    got = jax.jit(jax.grad(weighted(lambda x, a, bs: lora_matmul_slots(x, a, bs, 0.5)), argnums=(0, 1, 2)))(x, a, bs)
    want = jax.jit(jax.grad(weighted(plain), argnums=(0, 1, 2)))(x, a, bs)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_a_demo_train_step_slot_major_equals_gemmas_layout(demo, lora_params, make_batch):
    model, base = demo
    one_spec = MeshSpec(data=1, fsdp=1, tensor=1, devices=1)
    cfg = RunConfig(mesh=one_spec, data=DataSpec(max_length=32), lora=LoraSpec(rank=4), train=TrainSpec(batch_size=8))
    one = mesh.make_mesh(one_spec)
    trainable = lora_params(cfg.lora)
    batch = make_batch(8, 32, seed=2)
    out = {}
    for slot_major in (False, True):
        steps = step_lib.build_steps(model, cfg, optax.sgd(0.5), one, base, trainable, slot_major_mlp=slot_major)
        state, metrics = steps.train_step(steps.init_state(trainable), batch)
        out[slot_major] = (float(metrics["loss"]), float(metrics["grad_norm"]), state.params)
    np.testing.assert_allclose(out[True][0], out[False][0], rtol=1e-5)
    np.testing.assert_allclose(out[True][1], out[False][1], rtol=1e-4)
    for a, b in zip(jax.tree.leaves(out[True][2]), jax.tree.leaves(out[False][2]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
