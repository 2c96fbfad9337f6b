"""The quantized frozen base (``[model] quantize``, ``models.quantize``): what is held on the
device, how close its forward stays to the float one, and the one-line refusals."""

from __future__ import annotations

import pytest

from adapters_lib.config import ModelSpec, load_config
from adapters_lib.errors import WorkbenchError

TOKENS = [[2, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150]]


@pytest.fixture(scope="module")
def demo_float():
    from adapters_lib.models.loader import load_model

    return load_model(ModelSpec())


def _dequantized(params):
    """``dequantize_params(params, float32)`` as one program (leaf by leaf, op by op, it compiled
    a few small programs a leaf)."""
    import jax
    import jax.numpy as jnp

    from adapters_lib.models.quantize import quantized_base as quantize

    return jax.jit(quantize.dequantize_params, static_argnums=1)(params, jnp.float32)


def _first_two_layers(tiny):
    """A tiny Gemma 4's first two layers (a local one, a global k=v one), its own weights:
    every weight kind the checks read is there, and each program unrolls half the layers.
    Not for the KV-shared E-style model."""
    import dataclasses

    import jax.numpy as jnp

    from adapters_lib.models import families

    arch, _, params = tiny
    arch = dataclasses.replace(arch, num_layers=2, attention=arch.attention[:2])
    assert arch.attention == ("local", "global") and not arch.shared_kv()
    params = {k: v for k, v in params.items() if k not in ("layer_2", "layer_3")}
    return arch, families.model_class(arch)(dtype=jnp.float32), params


def _rel(a, b) -> float:
    import jax.numpy as jnp

    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def test_a_bad_quantize_value_is_one_line_naming_the_key():
    with pytest.raises(WorkbenchError) as e:
        load_config(None, ["model.quantize=int3"])
    text = str(e.value)
    assert "\n" not in text and "model.quantize" in text and "int4" in text


def test_a_tile_that_does_not_divide_a_dimension_is_one_line_naming_the_key():
    from adapters_lib.models.loader import load_model

    with pytest.raises(WorkbenchError) as e:  # the demo's D is 256: 48 does not divide it
        load_model(ModelSpec(quantize="int4", quantize_tile_size=48))
    text = str(e.value)
    assert "\n" not in text and "quantize_tile_size" in text and "256" in text


def test_gguf_mode_needs_a_gguf_base_and_a_table_mode_needs_a_quantized_base():
    from adapters_lib.models.loader import load_model

    with pytest.raises(WorkbenchError) as e:
        load_model(ModelSpec(quantize="gguf"))
    assert "\n" not in str(e.value) and "GGUF" in str(e.value) and "[model] quantize" in str(e.value)
    for bad in (["model.quantize_embedding=int3"],
                ["model.quantize=gguf", "model.quantize_embedding=int8"]):
        with pytest.raises(WorkbenchError) as e:
            load_config(None, bad)
        assert "\n" not in str(e.value) and "quantize_embedding" in str(e.value)


def test_a_gguf_base_keeps_its_own_blocks_and_computes_the_f32_loads_numbers(gguf_env, tmp_path,
                                                                             monkeypatch):
    """``quantize = "gguf"`` on a file with Q8_0, Q4_0, Q5_0 and Q4_1 tensors (gate Q8_0 beside
    up Q5_0: one int8 leaf), BF16 and F16 ones: each block tensor is held as its own integers
    and scales (Q4_1's offset too), and every weight, dequantized, is bit for bit the f32
    load's (gguf's own dequantization) — so are the logits. A second load reads the blocks
    back from the converted-weights cache, the same arrays of the same types."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import qwix

    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import quantized_base as quantize

    monkeypatch.setenv("GEMMA_WORKBENCH_WEIGHTS_CACHE", str(tmp_path / "converted"))
    source = str(gguf_env.files["mixed"])
    f32 = load_model(ModelSpec(source=source))
    held = load_model(ModelSpec(source=source, quantize="gguf"))
    again = load_model(ModelSpec(source=source, quantize="gguf"))
    assert any(p.name.endswith("-float32-gguf-blocks") for p in (tmp_path / "converted").iterdir())
    assert jax.tree.structure(again.params) == jax.tree.structure(held.params)
    for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(held.params), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32)))
    layer = held.params["layer_0"]
    want = {("embedder",): "int8", ("attn", "q_einsum"): "int4", ("mlp", "gating_einsum"): "int8",
            ("mlp", "linear"): "uint4"}
    got = {("embedder",): held.params["embedder"]["input_embedding"],
           ("attn", "q_einsum"): layer["attn"]["q_einsum"]["w"],
           ("mlp", "gating_einsum"): layer["mlp"]["gating_einsum"], ("mlp", "linear"): layer["mlp"]["linear"]}
    assert {k: str(v.qtype) for k, v in got.items()} == want
    assert got[("mlp", "linear")].bias is not None and got[("attn", "q_einsum")].bias is None
    assert not isinstance(layer["attn"]["attn_vec_einsum"]["w"], qwix.QArray)  # BF16 in the file
    assert quantize.device_bytes(held.params) < 0.35 * quantize.device_bytes(f32.params)
    for a, b in zip(jax.tree.leaves(quantize.dequantize_params(held.params, jnp.float32)),
                    jax.tree.leaves(f32.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    tokens = jnp.asarray([[2, 50, 60, 70, 80, 90]])
    np.testing.assert_array_equal(np.asarray(held.model.apply({"params": held.params}, tokens).logits),
                                  np.asarray(f32.model.apply({"params": f32.params}, tokens).logits))


def test_keras_route_refuses_a_base_quantization_keras_does_not_have_in_one_line():
    load_config(None, ["model.backend=keras", "model.quantize=int8"])  # Keras' own int8
    with pytest.raises(WorkbenchError) as e:
        load_config(None, ["model.backend=keras", "model.quantize=nf4"])
    text = str(e.value)
    assert "\n" not in text and "model.quantize = 'nf4'" in text and 'quantize = "int8"' in text
    with pytest.raises(WorkbenchError) as e:
        load_config(None, ["model.backend=keras", "model.quantize=int8", "model.quantize_embedding=none"])
    assert "\n" not in str(e.value) and "quantize_embedding" in str(e.value)


@pytest.mark.parametrize("mode, bits, tolerance", [("int8", 8, 0.05), ("int4", 4, 0.45),
                                                    ("nf4", 4, 0.45)])
def test_quantized_demo_forward_stays_near_the_float_forward(demo_float, mode, bits, tolerance):
    """The projections and the embedding/logits table are held as qwix QArrays (qvalue
    narrow, the device counts the bytes); the forward equals the float model on the
    dequantized weights (every einsum, the lookup and the logits read them), and stays within
    ``tolerance`` (relative L2 of the logits) of the float model. The demo's random Gaussian
    weights are the hard case for 4 bits: the real 270M is checked closer in test_real_270m."""
    import math

    import jax
    import jax.numpy as jnp
    import numpy as np
    import qwix

    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import qarray
    from adapters_lib.models.quantize import quantized_base as quantize

    q = load_model(ModelSpec(quantize=mode))
    leaves = jax.tree.leaves(q.params, is_leaf=lambda x: isinstance(x, qwix.QArray))
    qarrays = [x for x in leaves if isinstance(x, qwix.QArray)]
    assert len(qarrays) == 4 * 5 + 1  # q, kv, attn_vec, gating, linear in 4 layers; the table
    table = q.params["embedder"]["input_embedding"]
    assert isinstance(table, qwix.QArray) and table.scale.shape == (1024, 256 // 64)  # per row
    # the device's own byte count: 4-bit values take half a byte there (a 4-bit table as its
    # bytes, two values a byte: qarray.PackedQArray)
    assert isinstance(table, qarray.PackedQArray) == (bits == 4) and table.shape == (1024, 256)
    for w in (q.params["layer_0"]["mlp"]["linear"], table):
        assert quantize.device_bytes(w.qvalue) == math.prod(w.shape) * bits // 8
    tokens = jnp.asarray(TOKENS)
    out = q.model.apply({"params": q.params}, tokens).logits
    exact = demo_float.model.apply({"params": _dequantized(q.params)}, tokens).logits
    np.testing.assert_allclose(np.asarray(out), np.asarray(exact), atol=2e-5, rtol=1e-5)
    ref = demo_float.model.apply({"params": demo_float.params}, tokens).logits
    assert 0 < _rel(out, ref) < tolerance


def test_train_estimate_json_counts_the_quantized_base_as_the_device_holds_it(capsys):
    """``train CONFIG --estimate --json`` (here its printer, in-process): ``weights_bytes`` of
    an int4 base is what the device reports for the loaded int4 params, and below 0.3× of the
    f32 base (the demo's table is small); ``total_bytes`` is the sum of the terms."""
    import argparse
    import json

    from adapters_lib.memory import TERMS
    from adapters_lib.models.loader import load_model
    from adapters_lib.models.quantize import quantized_base as quantize
    from workbench.commands._estimate import print_estimate

    out = {}
    for mode in ("none", "int4"):
        cfg = load_config(None, ["mesh.devices=1", f"model.quantize={mode}"])
        args = argparse.Namespace(in_process=True, json=True, device=None)  # as the parser gives
        assert print_estimate(args, cfg, cfg.to_toml(), []) == 0
        out[mode] = json.loads(capsys.readouterr().out)
    q = out["int4"]
    assert q["quantize"] == "int4" and q["total_bytes"] == sum(q[f"{t}_bytes"] for t in TERMS)
    held = load_model(ModelSpec(quantize="int4")).params
    assert q["weights_bytes"] == quantize.device_bytes(held)
    assert q["weights_bytes"] < 0.3 * out["none"]["weights_bytes"]


def test_a_sharded_int4_step_over_4_devices_equals_the_one_device_step(demo, lora_params, make_batch):
    """The int4 base placed by the sharding rules on a (1, 2, 2) data×fsdp×tensor mesh (qvalues
    like their weights, scales where their dims still divide): the first train step's loss,
    grad norm and updated adapters equal those on one device. On the demo's first two layers
    (its local and its global one, placed by the same rules as the other two): the two train
    steps unroll half the layers."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from adapters_lib import mesh
    from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
    from adapters_lib.models import demo as demo_lib
    from adapters_lib.models.quantize import quantized_base as quantize
    from adapters_lib.train import step as step_lib

    config = demo_lib.demo_transformer_config()
    config = dataclasses.replace(config, attention_types=config.attention_types[:2])
    assert len(set(config.attention_types)) == 2
    model = demo_lib.demo_model_class()(config=config, dtype=jnp.float32)
    base, trainable = ({k: v for k, v in tree.items() if k not in ("layer_2", "layer_3")}
                       for tree in (demo[1], lora_params(LoraSpec(rank=4))))
    qmodel = quantize.with_quantized_base(model)
    qbase = quantize.quantize_params(base, "int4", config=model.config)  # base's arrays kept
    batch = make_batch(8, 32, seed=5, packed=True)
    out = {}
    for shape in ((1, 1, 1), (1, 2, 2)):
        cfg = RunConfig(mesh=MeshSpec(*shape, devices=int(np.prod(shape))),
                        data=DataSpec(max_length=32), lora=LoraSpec(rank=4),
                        train=TrainSpec(batch_size=8))
        steps = step_lib.build_steps(qmodel, cfg, optax.sgd(0.5), mesh.make_mesh(cfg.mesh), qbase,
                                     trainable)
        state, metrics = steps.train_step(steps.init_state(trainable), batch)
        out[shape] = jax.device_get(metrics), jax.device_get(state.params), steps.base_params
    (m1, p1, _), (m4, p4, placed) = out[(1, 1, 1)], out[(1, 2, 2)]
    linear = placed["layer_0"]["mlp"]["linear"]  # (F, D): F on tensor, D on fsdp
    assert len(linear.qvalue.sharding.device_set) == 4
    assert tuple(linear.qvalue.sharding.spec) == ("tensor", "fsdp")
    np.testing.assert_allclose(m4["loss"], m1["loss"], rtol=1e-5)
    np.testing.assert_allclose(m4["grad_norm"], m1["grad_norm"], rtol=1e-4)
    for got, want in zip(jax.tree.leaves(p4), jax.tree.leaves(p1), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["dense", "moe", "e"])
def test_a_gemma4_base_reads_its_quantized_weights(gemma4_tiny, kind):
    """Gemma 4's own Einsum layers (k_einsum of its k=v layers included), its MoE expert banks
    (read by ``jax.lax.ragged_dot``, not an Einsum), its embedding table and its per-layer
    input table are held quantized and read so: the forward on the int4 base equals the
    library's own forward on the dequantized floats. Only the router and the small
    per-layer-input projections stay float."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import qwix

    from adapters_lib.models.quantize import quantized_base as quantize

    # dense and MoE on their first two layers; E-style whole (its KV-shared layers)
    _, model, params = gemma4_tiny[kind] if kind == "e" else _first_two_layers(gemma4_tiny[kind])
    q = quantize.quantize_params(jax.tree.map(jnp.asarray, params), "int4", tile=8,
                                 config=model.config)
    flat = jax.tree_util.tree_flatten_with_path(q, is_leaf=lambda x: isinstance(x, qwix.QArray))[0]
    held = {jax.tree_util.keystr(p) for p, x in flat if isinstance(x, qwix.QArray)}
    float_matrices = {jax.tree_util.keystr(p) for p, x in flat
                      if not isinstance(x, qwix.QArray) and x.ndim > 1}
    assert "['embedder']['input_embedding']" in held
    if kind != "e":
        assert "['layer_1']['attn']['k_einsum']['w']" in held  # a k=v global layer
    if kind == "moe":  # the expert bank (E, 2, X, D) and (E, X, D), and the shared MLP
        assert {"['layer_0']['mlp']['gating_einsum']['w']", "['layer_0']['mlp']['linear']['w']",
                "['layer_0']['mlp2']['linear']"} <= held
        assert all("router_logits" in k for k in float_matrices)
    if kind == "e":
        assert "['embedder']['per_layer_embeddings']" in held
        assert all("per_layer" in k for k in float_matrices)
    tokens = jnp.asarray([[2, 5, 6, 7, 8, 9]])
    out = quantize.with_quantized_base(model).apply({"params": q}, tokens).logits
    exact = model.apply({"params": _dequantized(q)}, tokens).logits
    np.testing.assert_allclose(np.asarray(out), np.asarray(exact), atol=1e-5, rtol=1e-5)


def test_lora_on_quantized_expert_banks_trains_the_expert_adapters(gemma4_tiny):
    """The ``experts`` LoRA target on an int8 MoE bank: the adapters see the bank's tokens
    through the dequantized weights, and their gradient is not zero."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.models.quantize import quantized_base as quantize

    _, model, params = _first_two_layers(gemma4_tiny["moe"])
    spec = LoraSpec(rank=2, targets=("q", "experts"))
    q = quantize.quantize_params(jax.tree.map(jnp.asarray, params), "int8", tile=8,
                                 config=model.config)
    qmodel = quantize.with_quantized_base(model)
    adapters = lora.init_lora(qmodel, spec, q, jax.random.key(0))
    adapters = jax.tree.map(lambda a: a + 0.01, adapters)  # B off zero: every A gets a gradient
    net = lora.wrap(qmodel, spec)
    tokens = jnp.asarray([[2, 5, 6, 7, 8, 9]])

    def loss(a, q):
        return jnp.mean(net.apply({"params": lora.merge_lora(q, a)}, tokens).logits ** 2)

    grads = jax.jit(jax.grad(loss))(adapters, q)["layer_0"]["mlp"]  # one program
    assert {"lora_experts_gate_a", "lora_experts_down_b"} <= set(grads)
    assert all(float(jnp.abs(g).sum()) > 0 for g in grads.values())


def test_the_cross_entropy_reads_a_quantized_table_a_block_at_a_time(monkeypatch):
    """The train step's chunked cross-entropy on a quantized [V, D] table (read in 4 blocks of
    rows here) gives the loss and ∂hidden of the same table dequantized, up to float order."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import qwix

    from adapters_lib.models.quantize import qarray, quantize_layout
    from adapters_lib.train import loss as loss_lib

    monkeypatch.setattr(quantize_layout, "TABLE_BLOCK_BYTES", 256 * 32 * 4)
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    table = qwix.quantize(jax.random.normal(k1, (1024, 32)), jnp.int4, channelwise_axes=(0,),
                          tiled_axes={1: 8})
    assert qarray.table_blocks(1024, 32) == 4
    dense = qarray.dequantize(table)
    hidden = jax.random.normal(k2, (2, 16, 32))
    targets = jax.random.randint(k3, (2, 16), 0, 1024)
    mask = jnp.ones((2, 16), jnp.int32).at[1, 9:].set(0)

    def ce(h, t):
        return loss_lib.chunked_ce_sum(h, t, targets, mask, chunk=8, softcap=30.0, split_vocab=4)

    got, got_dh = jax.jit(jax.value_and_grad(ce))(hidden, table)  # jitted: one program each
    want, want_dh = jax.jit(jax.value_and_grad(ce))(hidden, dense)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got_dh), np.asarray(want_dh), rtol=1e-4, atol=1e-6)
    logits = qarray.vocab_logits(hidden, table)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(hidden @ dense.T), rtol=1e-5, atol=1e-5)


def test_generation_on_a_quantized_base_is_generation_on_its_numbers(demo_float):
    """The sampler on an int8 base (table included: the lookup, the logits and the KV cache's
    dtype all read it) generates the greedy tokens the float model generates on the same
    numbers dequantized — prefill and decode loop both."""

    from adapters_lib.models.quantize import quantized_base as quantize
    from adapters_lib.sample.sampler import Sampler
    from adapters_lib.sample.settings import SamplingSettings

    q = quantize.quantize_params(demo_float.params, "int8", config=demo_float.config)
    settings = SamplingSettings(max_new_tokens=8, temperature=0.0)
    prompts = ["1 + 1 =", "the cat"]
    held = Sampler(quantize.with_quantized_base(demo_float.model), q, demo_float.tokenizer)
    exact = Sampler(demo_float.model, _dequantized(q), demo_float.tokenizer)
    got = [c["tokens"] for c in held.generate_grid(prompts, [None], settings, chat=False)[0]]
    want = [c["tokens"] for c in exact.generate_grid(prompts, [None], settings, chat=False)[0]]
    assert got == want and all(len(t) > 0 for t in got)


def test_a_4bit_table_is_read_as_4_bits_and_its_logits_differentiate_block_by_block(monkeypatch):
    """The logits and ∂hidden of an int4 [V, D] table, compiled (not run): neither widens the
    whole table to a byte a value (sliced as int4, it did: 17 MiB of temporaries here; as its
    bytes, one copy at half a byte a value, 8.5 MiB) nor keeps it dequantized for the
    backward pass; held as its bytes (``qarray.PackedQArray``, how ``quantize_params`` holds
    a 4-bit table) not even that copy is made (0.5 MiB: a block); the gradient through the
    logits is that of the dequantized table, packed or not."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import qwix

    from adapters_lib.models.quantize import qarray, quantize_layout

    monkeypatch.setattr(quantize_layout, "TABLE_BLOCK_BYTES", 1 << 20)  # blocks of 1 MiB in f32
    vocab, dim = 65536, 256
    table = jax.eval_shape(lambda: qwix.quantize(jnp.zeros((vocab, dim), jnp.bfloat16), jnp.int4,
                                                 channelwise_axes=(0,), tiled_axes={1: 64}))
    h = jax.ShapeDtypeStruct((1, 8, dim), jnp.bfloat16)
    g = jax.ShapeDtypeStruct((1, 8, vocab), jnp.bfloat16)
    assert qarray.table_blocks(vocab, dim) == 64
    widened = vocab * dim  # the table at a byte a value: 16 MiB (its 4 bits: 8 MiB, an argument)

    def temp(fn, *args):
        return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes

    assert temp(lambda h, t: qarray.vocab_logits(h, t, out_dtype=jnp.bfloat16), h, table) < widened * 5 // 8
    assert temp(qarray.vocab_times, g, table) < widened * 5 // 8
    assert temp(jax.grad(lambda h, t: qarray.vocab_logits(h, t).sum()), h, table) < widened
    packed = jax.eval_shape(qarray.pack, table)
    assert packed.shape == (vocab, dim) and packed.qvalue.shape == (vocab, dim // 2)
    assert temp(lambda h, t: qarray.vocab_logits(h, t, out_dtype=jnp.bfloat16), h, packed) < widened // 16
    assert temp(qarray.vocab_times, g, packed) < widened // 16
    assert temp(jax.grad(lambda h, t: qarray.vocab_logits(h, t).sum()), h, packed) < widened // 8

    monkeypatch.setattr(quantize_layout, "TABLE_BLOCK_BYTES", 256 * 16 * 4)
    k1, k2 = jax.random.split(jax.random.key(1))
    small = qwix.quantize(jax.random.normal(k1, (1024, 16)), jnp.int4, channelwise_axes=(0,),
                          tiled_axes={1: 8})
    assert qarray.table_blocks(1024, 16) == 4
    dense = qarray.dequantize(small)
    x = jax.random.normal(k2, (2, 3, 16))
    want = jax.jit(jax.grad(lambda x: jnp.sin(x @ dense.T).sum()))(x)  # jitted: one program each
    for t in (small, qarray.pack(small)):
        got = jax.jit(jax.grad(lambda x, t: jnp.sin(qarray.vocab_logits(x, t)).sum()))(x, t)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(qarray.take_rows(qarray.pack(small), jnp.asarray([[3, 1000]]))),
                                  np.asarray(dense[jnp.asarray([[3, 1000]])]))


def test_a_layer_weight_is_dequantized_or_transposed_when_its_layer_runs():
    """Compiled (not run): the gradient through 8 chained layers holds about one layer's float
    weight at a time. A quantized weight passes an optimization barrier with its input before
    it is dequantized (``quantize._frozen_einsum``), a float one before its einsum in the train
    step (``variants._weight_at_use``): without them XLA:CPU made every layer's dequantized (or
    transposed) weight at the start, all live at once (here 14.3 and 8.4 MiB against 3.5 and
    3.9; the Gemma-3-1B shape's int4 LoRA step 2,095 → 963 MiB, its bf16 one 2,956 → 2,219)."""
    import jax
    import jax.numpy as jnp
    import qwix
    from flax import linen as nn
    from gemma.gm.nn import _layers

    from adapters_lib.models.quantize import quantized_base as quantize
    from adapters_lib.train import variants

    n, d, f = 8, 1024, 1024
    layer = d * f * 2  # one layer's weight in bf16

    def temp(fn, *args):
        return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes

    ws = [jax.eval_shape(lambda: qwix.quantize(jnp.zeros((f, d), jnp.bfloat16), jnp.int4,
                                               channelwise_axes=(0,), tiled_axes={1: 64}))] * n
    a = jax.ShapeDtypeStruct((d, 8), jnp.float32)

    def quantized(a, x, ws):
        for w in ws:
            x = jax.checkpoint(lambda x, w: jnp.tanh(quantize._frozen_einsum("bd,fd->bf", x, w)
                                                     + (x @ a.astype(x.dtype)) @ jnp.ones((8, f), x.dtype)))(x, w)
        return x.astype(jnp.float32).sum()

    assert temp(jax.grad(quantized), a, jax.ShapeDtypeStruct((64, d), jnp.bfloat16), ws) < 2 * layer

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i in range(n):
                g = _layers.Einsum((2, f // 2, d // 2), name=f"g{i}")("btd,cfd->btcf", x)
                x = x + jnp.tanh(g[..., 0, :] * g[..., 1, :])
            return x

    x = jax.ShapeDtypeStruct((2, 64, d // 2), jnp.bfloat16)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.bfloat16),
                          jax.eval_shape(lambda: Net().init(jax.random.key(0), jnp.zeros(x.shape, x.dtype))))

    def floats(p, x):
        with nn.intercept_methods(variants._weight_at_use):
            return Net().apply(p, x).astype(jnp.float32).sum()

    weight = 2 * (f // 2) * (d // 2) * 2  # 1 MiB each; 8.4 MiB of temporaries without the barrier
    assert temp(jax.grad(floats, argnums=1), params, x) < 5 * weight  # 3.9 MiB: activations mostly
