"""Block-sparse training attention: the same outputs and gradients as gemma's dense attention."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adapters_lib import memory
from adapters_lib.models import demo
from adapters_lib.train import loss as loss_lib
from adapters_lib.train import step as step_lib

LAYOUTS = {"mqa": 1, "gqa": 2, "mha": 4}  # num_kv_heads with 4 query heads (mha: one qkv einsum)


def _packed_batch(length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, 1000, (2, length)).astype(np.int32)
    seg = np.ones((2, length), np.int32)
    seg[0, length // 3:] = 2  # two packed examples
    seg[1, length - 24:] = 0  # padding at the end
    pos = np.zeros_like(seg)
    for r in range(2):
        for s in np.unique(seg[r]):
            idx = np.where(seg[r] == s)[0]
            pos[r, idx] = np.arange(len(idx))
    return jnp.asarray(tokens), jnp.asarray(pos), loss_lib.attention_mask(jnp.asarray(seg)), seg > 0


@pytest.mark.parametrize("length", [192, 256])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_blocked_attention_matches_dense_outputs_and_gradients(layout, length):
    config = dataclasses.replace(demo.demo_transformer_config(), num_kv_heads=LAYOUTS[layout])
    model = demo.demo_model_class()(config=config, dtype=jnp.float32)
    tokens, positions, mask, valid = _packed_batch(length)
    params = model.init(jax.random.key(0), tokens[:, :8])["params"]
    blocked = step_lib.with_blocked_attention(model)
    weights = jax.random.normal(jax.random.key(1), (*tokens.shape, config.num_embed)) * valid[..., None]

    def run(m):
        def loss(p):
            logits = m.apply({"params": p}, tokens, positions=positions, attention_mask=mask).logits
            return jnp.sum(logits * weights), logits
        return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

    (v_dense, logits_dense), g_dense = run(model)
    (v_blocked, logits_blocked), g_blocked = run(blocked)
    np.testing.assert_allclose(np.asarray(logits_blocked)[valid], np.asarray(logits_dense)[valid],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(v_blocked), float(v_dense), rtol=1e-4, atol=1e-3)  # a sum with cancellation
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(g_blocked)[0], jax.tree.leaves(g_dense),
                            strict=True):
        scale = max(1.0, float(np.abs(np.asarray(b)).max()))  # round-off grows with the entries summed
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-5 * scale,
                                   err_msg=jax.tree_util.keystr(path))


def test_blocked_attention_scores_fewer_keys():
    # the jaxpr's score tensors are the blocks, not [B, T, N, T]: fewer multiply-adds
    config = demo.demo_transformer_config()
    model = demo.demo_model_class()(config=config, dtype=jnp.float32)
    tokens, positions, mask, _ = _packed_batch(256)
    params = model.init(jax.random.key(0), tokens[:, :8])["params"]

    def flops(m):
        f = jax.jit(lambda p: m.apply({"params": p}, tokens, positions=positions, attention_mask=mask).logits)
        return f.lower(params).compile().cost_analysis()["flops"]

    dense, blocked = flops(model), flops(step_lib.with_blocked_attention(model))
    assert blocked < 0.95 * dense
    # the memory estimate counts the same keys: 2·window on local layers, ~half on global ones
    assert memory.scored_keys(256, config.sliding_window_size) == 2 * config.sliding_window_size
    assert memory.scored_keys(256) == 256 * 3 / 4
    assert memory.scored_keys(200) == 200
