"""Training attention (block-sparse scores; one fused dot_product_attention): the same outputs and
gradients as gemma's dense attention."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemma.gm.nn import _modules

from adapters_lib import memory
from adapters_lib.kernels import attention_splash
from adapters_lib.models import demo
from adapters_lib.train import attention, variants
from adapters_lib.train import loss as loss_lib

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


def _two_layers(**changes):
    """The demo config cut to its first two layers, one sliding-window and one global (the
    two attention types; the other two layers repeat them), and a 1024-token vocabulary
    (the batch's ids are < 1000): half the program to compile, the same attention."""
    config = demo.demo_transformer_config()
    kinds = config.attention_types[:2]
    assert set(kinds) == set(config.attention_types) and len(set(kinds)) == 2
    return dataclasses.replace(config, attention_types=kinds, num_embed=1024, **changes)


# The block-sparse path at a length it blocks fully (256: the local and the global layers in
# blocks) in the two ways a layer projects (mha: one qkv einsum; gqa: queries in groups over
# fewer KV heads, two queries each), and at 192 (the global layer not a multiple of its block:
# one dense score block); the fused call at 256, grouped (one gemma reference for both paths:
# ``_gemma``). The other layouts run the same code: one KV head (mqa, the demo's and Gemma 3's
# small models') is gqa's in groups of four, which the splash fallback test runs block-sparse at
# 128 and the splash cases in the kernel; mha's projection is the same before either path, and
# the fused call takes it as groups of one (the bf16 test below runs it grouped with a window).
CASES = [("gqa", "blocked", 192), ("gqa", "blocked", 256), ("mha", "blocked", 256), ("gqa", "xla", 256)]


@pytest.mark.parametrize(("layout", "kind", "length"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_training_attention_matches_gemma_outputs_and_gradients(layout, kind, length):
    # blocked: block-sparse scores; xla: the fused jax.nn.dot_product_attention path (on a GPU the
    # same call runs cuDNN's kernel), each against gemma's own dense attention
    _check_against_gemma(kind, length, num_kv_heads=LAYOUTS[layout])


@pytest.mark.parametrize(("layout", "soft_cap"), [("mqa", None), ("gqa", 50.0)])
def test_splash_kernel_matches_gemma_outputs_and_gradients(layout, soft_cap):
    # the TPU's Pallas kernel (here in Pallas' interpreter): 128-wide heads, the packed examples as
    # segment ids read off the mask, the window as a local mask, Gemma 2's soft-cap in the kernel
    _check_against_gemma("splash", 256, num_kv_heads=LAYOUTS[layout], head_dim=128,
                         attn_logits_soft_cap=soft_cap)


def test_splash_takes_what_the_kernel_can_and_falls_back_otherwise():
    q = jnp.zeros((1, 256, 4, 128))
    assert attention_splash.supported(q, jnp.zeros((1, 256, 1, 128)))
    assert not attention_splash.supported(jnp.zeros((1, 200, 4, 128)), jnp.zeros((1, 200, 1, 128)))
    assert not attention_splash.supported(jnp.zeros((1, 256, 4, 64)), jnp.zeros((1, 256, 1, 64)))
    # the demo's 64-wide heads take the block-sparse path under kind "splash": still gemma's values
    _check_against_gemma("splash", 128, num_kv_heads=1)
    seg = np.array([[1, 1, 1, 2, 2, 0, 0]])
    ids = np.asarray(attention_splash.segment_ids(loss_lib.attention_mask(jnp.asarray(seg))))
    assert ids.tolist() == [[0, 0, 0, 3, 3, 12, 13]]  # example starts; padding: ids of their own
    assert attention.default_kind("tpu") == "splash"


@functools.cache
def _model_and_params(**config_changes):
    """The two-layer model and its initial params, made once per config (the params do not
    depend on the sequence length; init compiled in one program, not run op by op)."""
    config = _two_layers(**config_changes)
    model = demo.demo_model_class()(config=config, dtype=jnp.float32)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((2, 8), jnp.int32))["params"]
    return config, model, params


def _run(config_changes: tuple, length: int, kind: str | None):
    """The loss ``Σ logits · weights`` on the packed batch, its logits and its gradients, under
    ``kind``'s training attention (None: gemma's own)."""
    config, model, params = _model_and_params(**dict(config_changes))
    tokens, positions, mask, valid = _packed_batch(length)
    weights = jax.random.normal(jax.random.key(1), (*tokens.shape, config.num_embed)) * valid[..., None]
    m = model if kind is None else variants.with_training_attention(model, kind)

    # the batch goes in as arguments, as in the train step (closed over, it would be constants
    # that XLA folds at compile time: seconds for the splash path's segment ids)
    def loss(p, tokens, positions, mask, weights):
        logits = m.apply({"params": p}, tokens, positions=positions, attention_mask=mask).logits
        return jnp.sum(logits * weights), logits
    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params, tokens, positions, mask, weights)


_gemma = functools.cache(functools.partial(_run, kind=None))
"""gemma's dense reference, computed once per config and length (each path compares with it)."""


def _check_against_gemma(kind, length, **config_changes):
    changes = tuple(sorted(config_changes.items()))
    valid = _packed_batch(length)[3]
    (v_dense, logits_dense), g_dense = _gemma(changes, length)
    (v_blocked, logits_blocked), g_blocked = _run(changes, length, kind)
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
    params = jax.eval_shape(model.init, jax.random.key(0), tokens[:, :8])["params"]  # shapes: all lower needs

    def flops(m):
        f = jax.jit(lambda p, t, pos, am: m.apply({"params": p}, t, positions=pos, attention_mask=am).logits)
        return f.lower(params, tokens, positions, mask).compile().cost_analysis()["flops"]

    dense, blocked = flops(model), flops(variants.with_blocked_attention(model))
    assert blocked < 0.95 * dense
    # the memory estimate counts the same keys: 2·window on local layers, ~half on global ones
    assert memory.scored_keys(256, config.sliding_window_size) == 2 * config.sliding_window_size
    assert memory.scored_keys(256) == 256 * 3 / 4
    assert memory.scored_keys(200) == 200


def test_fused_attention_equals_gemma_on_bf16_with_a_window_across_packed_examples():
    # the fused call alone, bf16, a window shorter than the examples: gemma's rule on positions
    rng = np.random.default_rng(3)
    b, t, n, k, h, window = 2, 64, 4, 2, 16, 8
    q, key, value = (jnp.asarray(rng.normal(size=(b, t, c, h)), jnp.bfloat16) for c in (n, k, k))
    seg = np.ones((b, t), np.int32)
    seg[0, 20:] = 2
    seg[1, 50:] = 0
    pos = np.concatenate([np.arange(20), np.arange(44)])[None].repeat(2, 0).astype(np.int32)
    mask = loss_lib.attention_mask(jnp.asarray(seg))
    full = mask & _modules.create_sliding_mask(jnp.asarray(pos), sliding_window_size=window)
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, key, value))  # gemma's math, in f32
    logits = jnp.einsum("btkgh,bskh->btkgs", q32.reshape(b, t, k, n // k, h), k32).reshape(b, t, n, t)
    probs = jax.nn.softmax(jnp.where(full[:, :, None], logits, _modules.K_MASK), axis=-1)
    ref = jnp.einsum("btkgs,bskh->btkgh", probs.reshape(b, t, k, n // k, t), v32).reshape(b, t, n, h)
    got = attention.fused_attention(q, key, value, mask, jnp.asarray(pos), window=window)
    keep = seg > 0
    np.testing.assert_allclose(np.asarray(got, np.float32)[keep], np.asarray(ref, np.float32)[keep],
                               rtol=2e-2, atol=2e-2)
    assert attention.default_kind("gpu") == "cudnn" and attention.default_kind("cpu") == "blocked"
