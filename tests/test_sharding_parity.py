"""Sharding parity on 8 simulated CPU devices: every valid mesh trains like one device.

For the demo model (4 heads, 1 KV head, D=256, F=1024, V=1024) all four meshes below are
valid; on a tensor axis the single KV head is replicated (a warning, not an error).
"""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

from adapters_lib import mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.train import step as step_lib

L = 32
MESHES = [(8, 1, 1), (1, 8, 1), (2, 1, 4), (2, 2, 2)]


def _cfg(shape) -> RunConfig:
    return RunConfig(mesh=MeshSpec(*shape, devices=int(np.prod(shape))), data=DataSpec(max_length=L),
                     lora=LoraSpec(rank=4), train=TrainSpec(batch_size=8))


def _first_step(demo, trainable, batch, shape):
    model, base = demo
    cfg = _cfg(shape)
    steps = step_lib.build_steps(model, cfg, optax.sgd(0.5), mesh.make_mesh(cfg.mesh), base, trainable)
    state, metrics = steps.train_step(steps.init_state(trainable), batch)
    return steps, state, jax.device_get(metrics)


@pytest.fixture(scope="module")
def reference(demo, lora_params, make_batch):
    trainable = lora_params(LoraSpec(rank=4))
    batch = make_batch(8, L, seed=21, packed=True)
    _, state, metrics = _first_step(demo, trainable, batch, (1, 1, 1))
    return trainable, batch, metrics, jax.device_get(state.params)


@pytest.mark.parametrize("shape", MESHES, ids=["x".join(map(str, s)) for s in MESHES])
def test_first_step_on_a_mesh_equals_one_device(demo, reference, shape):
    trainable, batch, ref_metrics, ref_params = reference
    assert not [p for p in mesh.validate(MeshSpec(*shape), demo[0].config, 8, L, 8) if p.level == "error"]
    steps, state, metrics = _first_step(demo, trainable, batch, shape)

    np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5)
    np.testing.assert_allclose(metrics["grad_norm"], ref_metrics["grad_norm"], rtol=1e-4)
    for got, want in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref_params), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-6)

    # adapters come back with the sharding of the base weight they adapt
    attn = state.params["layer_0"]["attn"]
    mlp = state.params["layer_0"]["mlp"]
    base = steps.base_params["layer_0"]
    fsdp = "fsdp" if shape[1] > 1 else None
    tensor = "tensor" if shape[2] > 1 else None
    q_w = tuple(base["attn"]["q_einsum"]["w"].sharding.spec)  # (N, D, H)
    assert tuple(attn["q_einsum"]["lora"]["q_a"].sharding.spec) == (q_w[1], None) == (fsdp, None)
    assert tuple(attn["q_einsum"]["lora"]["q_b"].sharding.spec) == (None, q_w[0]) == (None, tensor)
    lin = tuple(base["mlp"]["linear"].sharding.spec)  # (F, D)
    assert tuple(mlp["lora_linear"]["down_a"].sharding.spec) == (lin[0], None)
    assert tuple(mlp["lora_linear"]["down_b"].sharding.spec) == (None, lin[1])
    kv = tuple(base["attn"]["kv_einsum"]["w"].sharding.spec)  # (2, K=1, D, H): K replicated
    assert kv[1] is None
    assert tuple(attn["kv_einsum"]["lora"]["k_b"].sharding.spec) == (None, None)
    assert tuple(attn["kv_einsum"]["lora"]["k_a"].sharding.spec) == (kv[2], None)
    for leaf in jax.tree.leaves(state.params):
        assert len(leaf.sharding.device_set) == 8
