"""The named mesh: sharding rules for gemma params and LoRA, validation in words."""

from __future__ import annotations

import pytest

from adapters_lib import mesh
from adapters_lib.config import MeshSpec
from adapters_lib.errors import WorkbenchError

DEMO = {"num_embed": 1024, "embed_dim": 256, "hidden_dim": 1024, "num_heads": 4, "head_dim": 64,
        "num_kv_heads": 1, "attention_types": [0, 1, 0, 1]}
SIZES = {"data": 2, "fsdp": 2, "tensor": 2}


@pytest.mark.parametrize(("path", "shape", "expected"), [
    (("embedder", "input_embedding"), (1024, 256), ("tensor", "fsdp")),
    (("layer_0", "attn", "q_einsum", "w"), (4, 256, 64), ("tensor", "fsdp", None)),
    (("layer_0", "attn", "kv_einsum", "w"), (2, 2, 256, 64), (None, "tensor", "fsdp", None)),
    (("layer_0", "attn", "attn_vec_einsum", "w"), (4, 64, 256), ("tensor", None, "fsdp")),
    (("layer_0", "mlp", "gating_einsum"), (2, 1024, 256), (None, "tensor", "fsdp")),
    (("layer_0", "mlp", "linear"), (1024, 256), ("tensor", "fsdp")),
    (("layer_0", "pre_attention_norm", "scale"), (256,), (None,)),
    (("layer_0", "attn", "_query_norm", "scale"), (64,), (None,)),
])
def test_gemma_weights_shard_by_logical_rules(path, shape, expected):
    assert mesh.param_partition(path, shape, SIZES) == expected


@pytest.mark.parametrize(("path", "shape", "expected"), [
    (("layer_0", "attn", "q_einsum", "lora", "q_a"), (256, 8), ("fsdp", None)),  # in = D
    (("layer_0", "attn", "q_einsum", "lora", "q_b"), (8, 256), (None, "tensor")),  # out = N·H
    (("layer_0", "attn", "kv_einsum", "lora", "k_b"), (8, 128), (None, "tensor")),
    (("layer_0", "attn", "attn_vec_einsum", "lora", "o_a"), (256, 8), ("tensor", None)),  # in = N·H
    (("layer_0", "attn", "attn_vec_einsum", "lora", "o_b"), (8, 256), (None, "fsdp")),  # out = D
    (("layer_0", "mlp", "lora_gating_einsum", "up_a"), (256, 8), ("fsdp", None)),
    (("layer_0", "mlp", "lora_gating_einsum", "gate_b"), (8, 1024), (None, "tensor")),  # out = F
    (("layer_0", "mlp", "lora_linear", "down_a"), (1024, 8), ("tensor", None)),  # in = F
    (("layer_0", "mlp", "lora_linear", "down_b"), (8, 256), (None, "fsdp")),
])
def test_lora_matrices_follow_the_base_weight_dims(path, shape, expected):
    assert mesh.param_partition(path, shape, SIZES) == expected


def test_a_dim_the_axis_does_not_divide_is_replicated():
    sizes = {"data": 1, "fsdp": 3, "tensor": 4}
    # 1 KV head on tensor=4, D=256 on fsdp=3: both replicated
    assert mesh.param_partition(("l", "attn", "kv_einsum", "w"), (2, 1, 256, 64), sizes) == (None,) * 4
    assert mesh.param_partition(("l", "attn", "q_einsum", "w"), (4, 256, 64), sizes) == ("tensor", None, None)


def test_untransposed_gating_puts_the_hidden_dim_on_tensor():
    got = mesh.param_partition(("l", "mlp", "gating_einsum"), (2, 256, 1024), SIZES, transpose_gating=False)
    assert got == (None, "fsdp", "tensor")


def test_mqa_on_a_tensor_axis_is_a_warning_in_words():
    problems = mesh.validate(MeshSpec(data=2, fsdp=1, tensor=4), DEMO, batch_size=8, seq_len=128, device_count=8)
    assert [p.level for p in problems] == ["warning"]
    assert problems[0].message == (
        "tensor=4 does not divide num_kv_heads=1 (multi-query attention); "
        "the KV projection is replicated on the tensor axis")


def test_a_batch_the_data_axes_do_not_divide_is_an_error_with_choices():
    problems = mesh.validate(MeshSpec(data=2, fsdp=2, tensor=2), DEMO, batch_size=6, seq_len=128, device_count=8)
    errors = [p for p in problems if p.level == "error"]
    assert len(errors) == 1
    assert errors[0].message == "batch_size=6 is not divisible by data×fsdp=2×2=4"
    assert errors[0].hint == "choose batch_size 4, 8, 12, … or data×fsdp ∈ {1, 2, 3, 6}"


def test_grad_accum_splits_the_batch_and_is_checked():
    problems = mesh.validate(MeshSpec(data=8, fsdp=1, tensor=1), DEMO, batch_size=8, seq_len=64,
                             device_count=8, grad_accum=2)
    assert any("micro-batch batch_size/grad_accum=4 is not divisible by data×fsdp=8×1=8" in p.message
               for p in problems)
    problems = mesh.validate(MeshSpec(data=1, fsdp=1, tensor=1), DEMO, batch_size=8, seq_len=64,
                             device_count=1, grad_accum=3)
    assert problems[0].message == "batch_size=8 is not divisible by grad_accum=3"


def test_fsdp_that_does_not_divide_the_embedding_is_said_not_silent():
    cfg = dict(DEMO, embed_dim=100)
    problems = mesh.validate(MeshSpec(data=1, fsdp=8, tensor=1), cfg, batch_size=8, seq_len=64, device_count=8)
    assert [p.level for p in problems] == ["warning"]
    assert problems[0].message.startswith("fsdp=8 does not divide embed_dim=100; the weights are replicated")


def test_heads_that_tensor_does_not_divide_are_named():
    problems = mesh.validate(MeshSpec(data=1, fsdp=1, tensor=8), DEMO, batch_size=8, seq_len=64, device_count=8)
    text = " | ".join(p.message for p in problems)
    assert "tensor=8 does not divide num_heads=4" in text
    assert "num_embed" not in text and "hidden_dim" not in text  # 1024 divides by 8


def test_a_mesh_that_does_not_match_the_devices_is_an_error():
    problems = mesh.validate(MeshSpec(data=3, fsdp=1, tensor=1), DEMO, batch_size=6, seq_len=64, device_count=8)
    assert problems[0].level == "error" and "= 3, but there are 8 devices" in problems[0].message


def test_check_raises_one_line_for_errors_and_returns_warnings():
    with pytest.raises(WorkbenchError) as err:
        mesh.check(MeshSpec(data=8, fsdp=1, tensor=1), DEMO, batch_size=4, seq_len=64, device_count=8)
    assert "\n" not in str(err.value) and err.value.where == "[mesh]"
    warnings = mesh.check(MeshSpec(data=2, fsdp=1, tensor=4), DEMO, batch_size=8, seq_len=64, device_count=8)
    assert len(warnings) == 1


@pytest.mark.parametrize("shape", [(8, 1, 1), (1, 8, 1), (2, 1, 4), (2, 2, 2)])
def test_parity_meshes_are_valid_for_the_demo_model(shape):
    problems = mesh.validate(MeshSpec(*shape), DEMO, batch_size=8, seq_len=64, device_count=8)
    assert not [p for p in problems if p.level == "error"]
    # only tensor > 1 meets the single KV head
    assert len(problems) == (1 if shape[2] > 1 else 0)


def test_mesh_devices_uses_the_first_n_devices_with_auto_axes():
    import jax
    from jax.sharding import AxisType

    m = mesh.make_mesh(MeshSpec(data=1, fsdp=-1, tensor=1, devices=2))
    assert dict(m.shape) == {"data": 1, "fsdp": 2, "tensor": 1}
    assert set(m.devices.flat) == set(jax.devices()[:2])
    assert all(t == AxisType.Auto for t in m.axis_types)
    with pytest.raises(WorkbenchError, match="only 8 devices"):
        mesh.make_mesh(MeshSpec(devices=16))


def test_rules_place_the_real_demo_tree(demo):
    import jax

    _, params = demo
    m = mesh.make_mesh(MeshSpec(data=2, fsdp=2, tensor=2))
    shardings = mesh.params_shardings(m, params)
    assert tuple(shardings["embedder"]["input_embedding"].spec) == ("tensor", "fsdp")
    assert tuple(shardings["layer_0"]["attn"]["kv_einsum"]["w"].spec) == (None, None, "fsdp", None)
    placed = jax.device_put(params, shardings)
    shard = placed["layer_1"]["mlp"]["gating_einsum"].addressable_shards[0]
    assert shard.data.shape == (2, 512, 128)


def test_a_kv_adapter_stays_replicated_when_its_single_kv_head_is():
    sizes = {"data": 2, "fsdp": 1, "tensor": 4}
    heads = mesh.heads_of(DEMO)
    path = ("layer_0", "attn", "kv_einsum", "lora", "k_b")
    assert mesh.param_partition(path, (8, 64), sizes) == (None, "tensor")  # K·H=64 alone would split
    assert mesh.param_partition(path, (8, 64), sizes, heads=heads) == (None, None)  # like K=1
    q_path = ("layer_0", "attn", "q_einsum", "lora", "q_b")
    assert mesh.param_partition(q_path, (8, 256), sizes, heads=heads) == (None, "tensor")
