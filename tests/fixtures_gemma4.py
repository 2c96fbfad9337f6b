"""Tiny random-init Gemma 4 models of the three shapes, and a tiny Gemma 3n, made once per session.

- ``dense``: k=v global layers (one ``k_einsum``), a wider global head, partial rotary;
- ``moe``: 4 experts top-2 beside the shared MLP, k=v global layers;
- ``e``: per-layer inputs and KV sharing (the last 2 of 4 layers), a double-wide MLP there.

``gemma4_tiny[kind]`` is ``(arch, model, params)``: f32 numpy params of the library's own tree
(``jax.eval_shape`` of gemma's init, filled with seeded normals: no init program compiled).
``gemma3n_tiny`` is the same for a Gemma 3n: AltUp, Laurel, per-layer inputs, activation
sparsity in its first layer and KV sharing (its last 2 of 4 layers; ``L G`` unshared, so
gemma's and transformers' rules pick the same source layers).

Both have the demo tokenizer's 1024 ids: ``gemma4_tokenizer`` is the demo tokenizer with its
turn markers (105/106) spelled Gemma 4's way (``<|turn>``/``<turn|>``); Gemma 3n reads the
demo tokenizer as it is (Gemma 3's markers).
"""

from __future__ import annotations

from typing import Any

import pytest

_COMMON = dict(num_layers=4, embed_dim=32, hidden_dim=64, num_heads=2, head_dim=8, num_kv_heads=1,
               vocab_size=1024, attention=("local", "global", "local", "global"), sliding_window=4,
               use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=1.0,
               final_logit_softcap=30.0, local_rope=10_000, global_rope=1_000_000,
               global_head_dim=16)

SHAPES: dict[str, dict[str, Any]] = {
    "dense": dict(num_global_kv_heads=1, k_eq_v_global=True),
    "moe": dict(num_global_kv_heads=1, k_eq_v_global=True, num_experts=4, expert_dim=16, top_k_experts=2),
    "e": dict(per_layer_input_dim=8, kv_shared_layers=2, kv_shared_ffw_hidden=128),
}


def tiny_arch_3n():
    from adapters_lib.models.families.gemma3n import Gemma3nArch

    return Gemma3nArch("gemma3n", 4, 32, 64, 4, 8, 2, 1024, ("local", "global") * 2, 4,
                       use_qk_norm=True, transpose_gating=True, query_pre_attn_scalar=1.0,
                       final_logit_softcap=30.0, local_rope=10_000, global_rope=1_000_000,
                       per_layer_input_dim=8, kv_shared_layers=2, laurel_rank=4,
                       activation_sparsity=(0.95, 0.0, 0.0, 0.0))


def _random_params(model, seed: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    shapes = jax.eval_shape(lambda r, m=model: m.init(r, jnp.zeros((1, 4), jnp.int32))["params"],
                            jax.random.key(seed))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s, rng=rng: (rng.standard_normal(s.shape) * 0.3).astype(np.float32), shapes)


def tiny_arch(kind: str):
    from adapters_lib.models.families.gemma4 import Gemma4Arch

    return Gemma4Arch("gemma4", **_COMMON, **SHAPES[kind])


@pytest.fixture(scope="session")
def gemma4_tiny() -> dict[str, tuple[Any, Any, Any]]:
    import jax.numpy as jnp

    from adapters_lib.models import families

    out = {}
    for i, kind in enumerate(SHAPES):
        arch = tiny_arch(kind)
        model = families.model_class(arch)(dtype=jnp.float32)
        out[kind] = (arch, model, _random_params(model, i))
    return out


@pytest.fixture(scope="session")
def gemma3n_tiny() -> tuple[Any, Any, Any]:
    import jax.numpy as jnp

    from adapters_lib.models import families

    arch = tiny_arch_3n()
    model = families.model_class(arch)(dtype=jnp.float32)
    return arch, model, _random_params(model, 5)


@pytest.fixture(scope="session")
def gemma4_tokenizer(tmp_path_factory) -> str:
    """A Gemma 4 ``tokenizer.model``: the demo's, ``<start_of_turn>``/``<end_of_turn>`` (105/106)
    renamed ``<|turn>``/``<turn|>`` (gemma's ``Gemma4Tokenizer`` ids)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    from adapters_lib.models import demo

    proto = pb.ModelProto()
    proto.ParseFromString(demo.ensure_demo_tokenizer().read_bytes())
    assert (proto.pieces[105].piece, proto.pieces[106].piece) == ("<start_of_turn>", "<end_of_turn>")
    proto.pieces[105].piece, proto.pieces[106].piece = "<|turn>", "<turn|>"
    path = tmp_path_factory.mktemp("gemma4-tokenizer") / "tokenizer.model"
    path.write_bytes(proto.SerializeToString())
    return str(path)
