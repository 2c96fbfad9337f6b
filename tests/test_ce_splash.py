"""The cross-entropy by a Pallas kernel — JAX's splash attention kernel or the project's own
(``ce_splash``, ``ce_flash``; interpreted off a TPU) — against the chunked XLA path (itself held
against full-logits CE in test_step.py)."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from adapters_lib import mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.kernels import ce_flash, ce_splash
from adapters_lib.train import loss as loss_lib
from adapters_lib.train import step as step_lib

ROWS, LENGTH, DIM = 2, 128, 128


def _problem(vocab: int, dtype, seed: int = 0):
    k = jax.random.split(jax.random.key(seed), 4)
    hidden = jax.random.normal(k[0], (ROWS, LENGTH, DIM), jnp.float32).astype(dtype)
    table = (jax.random.normal(k[1], (vocab, DIM), jnp.float32) * 0.3).astype(dtype)
    targets = jax.random.randint(k[2], (ROWS, LENGTH), 0, vocab)
    mask = (jax.random.uniform(k[3], (ROWS, LENGTH)) > 0.25).astype(jnp.int32)  # ~a quarter zeros
    return hidden, table, targets, mask


def _loss_and_grad(kernel, hidden, table, targets, mask, softcap=None, wrt=0):
    def f(h, t):
        return loss_lib.chunked_ce_sum(h, t, targets, mask, chunk=32, softcap=softcap, kernel=kernel)

    fn = jax.jit(jax.value_and_grad(f, argnums=wrt))
    return fn(hidden, table), "pallas_call" in str(jax.make_jaxpr(jax.value_and_grad(f, argnums=wrt))(hidden, table))


# f32: the kernel's sums in another order, nothing else; bf16: the kernel's Σ p·T rounded to bf16
# before T[t] is subtracted (the XLA path rounds p − onehot to bf16 before its matmul)
TOL = {"float32": dict(loss=1e-6, grad=1e-5), "bfloat16": dict(loss=1e-5, grad=2e-2)}


KERNELS = pytest.mark.parametrize("kernel", ce_splash.KERNELS)


@KERNELS
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kernel_cross_entropy_and_its_hidden_gradient_equal_the_chunked_path(kernel, dtype):
    hidden, table, targets, mask = _problem(2048, jnp.dtype(dtype))
    (loss, grad), used = _loss_and_grad(kernel, hidden, table, targets, mask)
    (ref, ref_grad), ref_used = _loss_and_grad("xla", hidden, table, targets, mask)
    assert used and not ref_used
    tol = TOL[dtype]
    assert grad.dtype == ref_grad.dtype == jnp.dtype(dtype)
    np.testing.assert_allclose(float(loss), float(ref), rtol=tol["loss"])
    g, r = np.asarray(grad, np.float32), np.asarray(ref_grad, np.float32)
    scale = np.abs(r).max()
    np.testing.assert_allclose(g, r, atol=tol["grad"] * scale, rtol=0)
    assert not np.any(g[np.asarray(mask) == 0])  # the masked positions get no gradient


@KERNELS
@pytest.mark.parametrize("case", ["softcap", "vocab", "trained table"])
def test_an_ineligible_kernel_request_is_the_chunked_path(kernel, case):
    vocab = 1000 if case == "vocab" else 1024  # 1000: no multiple of 128
    hidden, table, targets, mask = _problem(vocab, jnp.float32, seed=1)
    softcap = 30.0 if case == "softcap" else None
    wrt = (0, 1) if case == "trained table" else 0
    (loss, grad), used = _loss_and_grad(kernel, hidden, table, targets, mask, softcap=softcap, wrt=wrt)
    (ref, ref_grad), _ = _loss_and_grad("xla", hidden, table, targets, mask, softcap=softcap, wrt=wrt)
    assert not used  # a trained table: the forward under differentiation takes the chunked path
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_block_sizes_divide_and_fit_a_v5e_vmem():
    # Gemma 3 270M, 1B, 4B at 4 × 2048 loss positions, bf16: each compiled for a v5e (deviceless)
    assert ce_splash.blocks(8192, 262144, 640, 2) == (1024, 512)
    assert ce_splash.blocks(8192, 262144, 1152, 2) == (512, 512)
    assert ce_splash.blocks(8192, 262144, 2560, 2) == (256, 256)
    assert ce_splash.blocks(256, 2048, 128, 4) == (256, 512)
    assert ce_splash.blocks(100, 2048, 128, 4) is None
    # what XLA:TPU refused on a v5e (over its 16 MiB of scoped VMEM)
    for dim, bq, bkv in ((1152, 1024, 512), (1152, 512, 1024), (2560, 256, 512), (640, 1024, 1024)):
        assert ce_splash.vmem_bytes(bq, bkv, dim, 2) > ce_splash.VMEM_BUDGET


def test_flash_block_sizes_are_the_v5e_measured_ones_within_its_vmem():
    # 1024 × 1024 measured fastest on a v5e at the Gemma-3-1B step's shape (bench/results/tpu-v5e-cross-entropy.json);
    # each pick below compiled for a v5e (deviceless) with the kernel's own VMEM limit
    assert ce_flash.blocks(8192, 262144, 640, 2) == (1024, 1024)
    assert ce_flash.blocks(8192, 262144, 1152, 2) == (1024, 1024)
    assert ce_flash.blocks(8192, 262144, 2560, 2) == (1024, 1024)
    assert ce_flash.blocks(8192, 262144, 3840, 2) == (512, 1024)
    assert ce_flash.blocks(4096 + 512, 262144, 1152, 2) == (512, 1024)  # 1024 does not divide the rows
    assert ce_flash.blocks(100, 2048, 128, 4) is None
    # XLA:TPU refused D 2560 at (2048, 512) and D 3840 at (2048, 512): over the budget here
    for dim, bq, bv in ((2560, 2048, 512), (3840, 2048, 512)):
        assert ce_flash.vmem_bytes(bq, bv, dim, 2) > ce_flash.VMEM_BUDGET


def test_the_flash_kernel_gives_lse_and_the_softmax_mean_of_the_table():
    k = jax.random.split(jax.random.key(4), 2)
    h = jax.random.normal(k[0], (256, DIM), jnp.float32)
    table = jax.random.normal(k[1], (1024, DIM), jnp.float32) * 0.3
    o, lse = ce_flash.softmax_mean(h, table, interpret=True, sizes=(128, 256))  # a 2 × 4 grid
    s = h @ table.T
    np.testing.assert_allclose(np.asarray(lse), np.asarray(jax.nn.logsumexp(s, -1)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(o), np.asarray(jax.nn.softmax(s, -1) @ table), rtol=1e-5, atol=1e-6)


ONE = MeshSpec(data=1, fsdp=1, tensor=1, devices=1)


@KERNELS
def test_a_demo_train_step_with_a_kernel_equals_the_chunked_path(kernel, demo, lora_params, make_batch, caplog):
    model, base = demo
    cfg = RunConfig(mesh=ONE, data=DataSpec(max_length=32), lora=LoraSpec(rank=4), train=TrainSpec(batch_size=8))
    one = mesh.make_mesh(ONE)
    trainable = lora_params(cfg.lora)
    batch = make_batch(8, 32, seed=2)
    out = {}
    caplog.set_level(logging.DEBUG, logger="adapters_lib.train.loss")
    for kind in ("xla", kernel):  # every position (8 × 32 = 256 rows: a multiple of 128)
        steps = step_lib.build_steps(model, cfg, optax.sgd(0.5), one, base, trainable, gather_loss=False,
                                     ce_kernel=kind)
        assert steps.ce_kernel == kind
        state, metrics = steps.train_step(steps.init_state(trainable), batch)
        out[kind] = (float(metrics["loss"]), float(metrics["grad_norm"]), state.params)
    assert not [r for r in caplog.records if "does not apply" in r.getMessage()]  # the kernel ran
    np.testing.assert_allclose(out[kernel][0], out["xla"][0], rtol=1e-5)
    np.testing.assert_allclose(out[kernel][1], out["xla"][1], rtol=1e-4)
    for a, b in zip(jax.tree.leaves(out[kernel][2]), jax.tree.leaves(out["xla"][2]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    for why in (dict(full_ft=True, softcap=None), dict(full_ft=False, softcap=30.0)):
        assert step_lib._ce_kernel(kernel, config=model.config, mesh=one, **why) == "xla"
    # unasked, the kernel is the TPU's (measured there); off a TPU the interpreter would be slow
    assert step_lib._ce_kernel(None, config=model.config, mesh=one, full_ft=False, softcap=None) == "xla"


@KERNELS
def test_on_a_mesh_the_kernel_runs_per_device_on_its_rows(kernel):
    devices = np.array(jax.devices()[:4])
    if devices.size < 4:
        pytest.skip("needs 4 host devices (conftest's XLA_FLAGS)")
    k = jax.random.split(jax.random.key(3), 4)
    hidden = jax.random.normal(k[0], (4, LENGTH, DIM), jnp.float32)
    table = jax.random.normal(k[1], (1024, DIM), jnp.float32) * 0.3
    targets = jax.random.randint(k[2], (4, LENGTH), 0, 1024)
    mask = (jax.random.uniform(k[3], (4, LENGTH)) > 0.25).astype(jnp.int32)

    def run(kernel, grid):
        m = jax.sharding.Mesh(devices.reshape(grid), ("data", "fsdp", "tensor"))

        def f(h):
            return loss_lib.chunked_ce_sum(h, table, targets, mask, chunk=LENGTH, kernel=kernel, mesh=m)

        return jax.jit(jax.value_and_grad(f))(hidden), "pallas_call" in str(jax.make_jaxpr(jax.grad(f))(hidden))

    (ref, ref_grad), _ = run("xla", (2, 2, 1))
    for grid, used in (((2, 2, 1), True), ((1, 2, 2), False)):  # tensor=2 splits the vocabulary: XLA's path
        (loss, grad), ran = run(kernel, grid)
        assert ran == used
        np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(ref_grad), rtol=0, atol=1e-5)
