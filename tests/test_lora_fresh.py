"""Fresh adapters made on the host (``lora.fresh``): flax's kaiming-uniform bound for every A
shape, B zeros, the same values eager and traced, in every process; a rank's A the first columns
of a larger rank's, an adapter's values the same whatever the other targets."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from adapters_lib.config import LORA_TARGETS, LoraSpec
from adapters_lib.lora import fresh, traced_shapes
from adapters_lib.models import demo

A_SHAPES = [(256, 4), (1024, 16), (64, 1), (3, 64, 8)]
"""The demo's q/down A, a rank 1, an expert bank's ``(E, in, r)``."""


@pytest.fixture(scope="module")
def model():
    return demo.demo_model("float32")


def _flat(tree) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("shape", A_SHAPES, ids=str)
def test_the_bound_is_flax_kaiming_uniforms_for_the_shape_and_the_values_fill_it(shape):
    key = jax.random.key(5)
    # flax's draw is uniform(key, shape, -1) times its bound: their ratio is the bound itself
    theirs = np.asarray(nn.initializers.kaiming_uniform()(key, shape, jnp.float32))
    unit = np.asarray(jax.random.uniform(key, shape, jnp.float32, -1))
    np.testing.assert_allclose(theirs / unit, fresh.kaiming_bound(shape), rtol=1e-6)

    big = (*shape[:-1], 4096)  # the bound does not depend on the rank (the last axis)
    assert fresh.kaiming_bound(big) == fresh.kaiming_bound(shape)
    ours = fresh.a_values([0, 7], ("layer_0", "x_a"), big, np.float32)
    bound = float(fresh.kaiming_bound(shape))
    assert ours.shape == big and ours.dtype == np.float32
    assert ours.min() >= -bound and ours.max() < bound
    assert ours.min() < -0.99 * bound and ours.max() > 0.99 * bound
    assert abs(ours.mean()) < 0.01 * bound
    np.testing.assert_allclose(ours.std(), bound / np.sqrt(3), rtol=0.01)  # uniform's


def test_init_is_a_function_of_the_seed_and_the_path_and_a_rank_is_a_larger_ranks_first_columns(model):
    spec = LoraSpec(rank=4, alpha=8.0, targets=("q", "v", "down"))
    got = _flat(traced_shapes.init_lora(model, spec, None, jax.random.key(3)))
    again = _flat(traced_shapes.init_lora(model, spec, None, jax.random.key(3)))
    other = _flat(traced_shapes.init_lora(model, spec, None, jax.random.key(4)))
    wider = _flat(traced_shapes.init_lora(model, LoraSpec(rank=9, alpha=8.0, targets=spec.targets), None, jax.random.key(3)))
    every = _flat(traced_shapes.init_lora(model, LoraSpec(rank=4, alpha=8.0, targets=LORA_TARGETS), None, jax.random.key(3)))
    assert len(got) == 2 * 3 * len(model.config.attention_types)
    seen = set()
    for path, x in got.items():
        np.testing.assert_array_equal(x, again[path])
        np.testing.assert_array_equal(x, every[path])  # the other targets change nothing
        if path.endswith("_b']"):
            assert not x.any() and x.shape[0] == 4
            continue
        assert x.shape[-1] == 4 and not np.array_equal(x, other[path])
        np.testing.assert_array_equal(x, wider[path][..., :4])
        seen.add(x.tobytes())
    assert len(seen) == len(got) // 2  # every A its own numbers (one seed each)


def test_a_traced_init_makes_the_same_values_and_a_bfloat16_one_the_rounded_float32(model):
    spec = LoraSpec(rank=3, alpha=6.0, targets=("k", "o", "up"))
    eager = traced_shapes.init_lora(model, spec, None, jax.random.key(1))
    traced = jax.jit(lambda r: traced_shapes.init_lora(model, spec, None, r))(jax.random.key(1))
    raw = traced_shapes.init_lora(model, spec, None, jax.random.PRNGKey(1))  # a raw uint32 key: its words
    half = traced_shapes.init_lora(model, LoraSpec(rank=3, alpha=6.0, targets=spec.targets, dtype="bfloat16"), None,
                                   jax.random.key(1))
    abstract = jax.eval_shape(lambda: traced_shapes.init_lora(model, spec, None, jax.random.key(0)))
    assert jax.tree.structure(abstract) == jax.tree.structure(eager)
    for path, x in _flat(eager).items():
        np.testing.assert_array_equal(x, _flat(traced)[path])
        np.testing.assert_array_equal(x, _flat(raw)[path])
        np.testing.assert_array_equal(x.astype(jnp.bfloat16), _flat(half)[path])
    assert {x.dtype for x in jax.tree.leaves(half)} == {jnp.dtype("bfloat16")}
