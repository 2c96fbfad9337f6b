"""An int8 base's generation copy (``models.decode_layout.Int8Rows``): its projections keep the
base's own int8 tiles and are read by int8 × int8 dots (the activation quantized at the dot),
its table is one int8 row a token; and the greedy choice of the sampler (first index of the
max, as ``argmax``)."""

from __future__ import annotations

import pytest

from adapters_lib.config import ModelSpec

# gemma's einsums (Gemma 2/3: _modules.py) and their weights' shapes (small)
EINSUMS = [
    ("q_einsum", "BTD,NDH->BTNH", (2, 3, 128), (4, 128, 64)),
    ("kv_einsum", "BSD,CKDH->CBSKH", (2, 3, 128), (2, 1, 128, 64)),
    ("qkv_einsum", "BTD,SNDH->SBTNH", (2, 3, 128), (3, 2, 128, 64)),
    ("attn_vec_einsum", "BTNH,NHD->BTD", (2, 3, 4, 64), (4, 64, 128)),
    ("gating_einsum", "...F,NHF->...NH", (2, 3, 128), (2, 256, 128)),
    ("linear", "...H,HF->...F", (2, 3, 256), (256, 128)),
]


@pytest.mark.parametrize("kind, eqn, x_shape, w_shape", EINSUMS)
def test_an_int8_rows_einsum_keeps_the_base_tiles_and_stays_near_the_float_einsum(kind, eqn, x_shape, w_shape):
    """Each gemma einsum on an int8 base's weight: as ``Int8Rows`` the int8 values and
    scales are the QArray's own (a tile of 64 is a block), and the int8 × int8 einsum (the
    activation quantized per block) is within 1 % (relative L2) of the float einsum of the
    dequantized weight."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from adapters_lib.models import decode_layout, quantize
    from adapters_lib.models.quantize import qarray

    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, x_shape, jnp.float32)
    path = ("layer_0", "mlp" if kind in ("gating_einsum", "linear") else "attn", kind)
    if kind not in ("gating_einsum", "linear"):
        path = (*path, "w")
    tree = quantize.quantize_params(_nest(path, jax.random.normal(kw, w_shape, jnp.float32)), "int8")
    w = _get(tree, path)
    rows = decode_layout.int8_rows(tree, _Config(128), "gemma3", "float32")
    got = _get(rows, path)
    assert isinstance(got, decode_layout.Int8Rows()) and got.q.dtype == jnp.int8
    dense = qarray.dequantize(w, jnp.float32)
    assert got.q.size == w.qvalue.size and got.q.ndim == 3 and got.q.shape[-1] == 64  # blocks = tiles
    back = decode_layout.to_int8_rows(dense, got.contract, "float32", 64)
    np.testing.assert_array_equal(np.asarray(back.q), np.asarray(got.q))
    want = jnp.einsum(eqn, x, dense)
    out = decode_layout.int8_einsum(eqn, x, got)
    assert out.shape == want.shape and out.dtype == x.dtype
    assert float(jnp.linalg.norm(out - want) / jnp.linalg.norm(want)) < 0.01


def test_the_demo_int8_generation_copy_reads_int8_rows_near_its_base_and_decodes_ab(monkeypatch):
    """``load_model(quantize="int8", generation_dtype=...)`` holds every projection and the
    table as ``Int8Rows`` (a generation copy: not exported), its logits stay within 5 % of
    the int8 base read in floats (the demo's random weights: the hard case, as in
    test_quantize; the real 270M's KL is in BENCHMARKS), and the A/B pair decodes greedily; the compiled decode reads
    the int8 weights as they lie (no weight-sized convert or copy in it)."""
    import re

    import jax
    import jax.numpy as jnp

    from adapters_lib import program_store
    from adapters_lib.models import decode_layout
    from adapters_lib.models.loader import load_model
    from adapters_lib.sample.sampler import Sampler
    from adapters_lib.sample.settings import SamplingSettings

    monkeypatch.setattr(program_store, "_FOLDER", None)  # compiled here, its text read
    base = load_model(ModelSpec(quantize="int8"))
    copy = load_model(ModelSpec(quantize="int8"), generation_dtype="float32")
    rows = [x for x in jax.tree.leaves(copy.params, is_leaf=lambda x: isinstance(x, decode_layout.Int8Rows()))
            if isinstance(x, decode_layout.Int8Rows())]
    assert len(rows) == 4 * 5 + 1 and decode_layout.holds(copy.params)
    table = copy.params["embedder"]["input_embedding"]
    assert table.q.shape == (1024, 256) and table.scale.shape == (1024,)  # one row a token
    tokens = jnp.asarray([[2, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150]])
    got = copy.model.apply({"params": copy.params}, tokens).logits
    want = base.model.apply({"params": base.params}, tokens).logits
    assert float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want)) < 0.05
    assert float((got.argmax(-1) == want.argmax(-1)).mean()) >= 0.9

    sampler = Sampler.from_loaded(copy)
    settings = SamplingSettings(max_new_tokens=6, temperature=0.0)
    grid = sampler.generate_grid(["the cat"], [None, None], settings, chat=False)
    assert grid[0][0]["tokens"] and grid[0][0]["tokens"] == grid[1][0]["tokens"]
    # a weight's shape, its dims in any order (a transposed copy too): not merely its size, which
    # a KV cache of 512 slots shares with the kv projection ([1, 512, 1, 64] and [2, 1, 256, 64])
    shapes = {tuple(sorted(x.q.shape)) for x in rows}

    def float_weights(sampler) -> int:  # weight-sized float arrays written in its decodes
        text = "".join(c.as_text() for c in sampler._program._decoders.values())
        found = re.finditer(r"= (?:f32|bf16)\[([\d,]+)\]\S* (?:convert|copy|fusion)\(", text)
        return sum(tuple(sorted(int(d) for d in m.group(1).split(","))) in shapes for m in found)

    assert float_weights(sampler) == 0
    plain = Sampler.from_loaded(base)  # the base as trained: every token dequantizes (the detector sees it)
    plain.generate_grid(["the cat"], [None, None], settings, chat=False)
    assert float_weights(plain) > 0


def test_the_greedy_choice_is_the_first_index_of_the_max():
    """The sampler's greedy pick (two plain reductions, not XLA's argmax): ``argmax``'s
    answer, ties to the lowest id; forbidden ids never; NaN logits give id 0, in range."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from adapters_lib.sample.program import Program

    prog = Program.__new__(Program)
    prog.forbidden, prog.decodable = (3,), 0
    logits = jnp.asarray([[[0.0, 2.0, 1.0, 9.0, 2.0]], [[5.0, 1.0, 5.0, 0.0, 0.0]]])
    keys = jax.random.split(jax.random.key(0), 1)  # the sampled branch is traced too (lax.cond)
    greedy = (keys, jnp.float32(0.0), jnp.int32(0), jnp.float32(1.0))  # temperature 0: greedy
    out = prog._choose(logits, *greedy)
    np.testing.assert_array_equal(np.asarray(out), [[1], [0]])
    nan = prog._choose(jnp.full((1, 1, 5), jnp.nan), *greedy)
    np.testing.assert_array_equal(np.asarray(nan), [[0]])


def test_a_generation_copys_tree_pickles_by_name_for_the_program_store():
    """The program store pickles a program's argument tree: the decode layout's leaf classes
    are found by name (``decode_layout._PermutedLeaf`` / ``_Int8RowsLeaf``), in a new
    process too (before, a generation copy's prefill and decode were "not kept")."""
    import pickle
    import subprocess
    import sys

    import jax
    import jax.numpy as jnp

    from adapters_lib.models import decode_layout

    tree = {"a": decode_layout.to_int8_rows(jnp.ones((4, 64)), (1,), "bfloat16"),
            "b": decode_layout.Permuted()(jnp.ones((2, 3)), (1, 0))}
    blob = pickle.dumps(jax.tree.structure(tree))
    assert pickle.loads(blob) == jax.tree.structure(tree)
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True).stdout
    assert b"_Int8RowsLeaf" in out and b"_PermutedLeaf" in out


class _Config:
    def __init__(self, embed_dim: int):
        self.embed_dim = embed_dim


def _nest(path, value):
    out = value
    for key in reversed(path):
        out = {key: out}
    return out


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree
