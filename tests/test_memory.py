"""The per-device memory estimate: terms, verdicts, real Gemma sizes, and the compiled step."""

from __future__ import annotations

import dataclasses

import pytest

from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.memory import device as device_memory
from adapters_lib.memory import estimate as memory
from adapters_lib.memory import run_estimate

DEMO = {"num_embed": 1024, "embed_dim": 256, "hidden_dim": 1024, "num_heads": 4, "head_dim": 64,
        "num_kv_heads": 1, "attention_types": [0, 1, 0, 1], "use_qk_norm": True,
        "use_post_attn_norm": True, "use_post_ffw_norm": True, "transpose_gating_einsum": True}


def test_verdict_is_fits_below_80_percent_tight_to_100_exceeds_above():
    e = memory.estimate(DEMO, batch_size=8, seq_len=128)
    assert dataclasses.replace(e, device_bytes=int(e.total / 0.79)).verdict == "fits"
    assert dataclasses.replace(e, device_bytes=int(e.total / 0.9)).verdict == "tight"
    assert dataclasses.replace(e, device_bytes=int(e.total / 1.1)).verdict == "exceeds"
    assert e.verdict == "unknown"
    d = dataclasses.replace(e, device_bytes=2**30).to_dict()
    assert d["total"] == sum(d[t] for t in memory.TERMS) and d["verdict"] == "fits"


def test_lora_trains_only_adapters_and_full_finetune_pays_for_every_param():
    lora = memory.estimate(DEMO, batch_size=8, seq_len=128, lora_rank=8)
    full = memory.estimate(DEMO, batch_size=8, seq_len=128, lora_enabled=False)
    # closed form: r·(in+out) per target and layer
    per_layer = 8 * ((256 + 256) + 2 * (256 + 64) + (256 + 256) + 2 * (256 + 1024) + (1024 + 256))
    assert lora.trainable_params == 4 * per_layer
    assert lora.optimizer == 2 * 4 * lora.trainable_params
    assert full.trainable_params == full.total_params
    assert full.optimizer == 2 * full.weights and full.gradients == full.weights


def test_sharding_divides_weights_and_activations():
    one = memory.estimate(DEMO, batch_size=8, seq_len=128)
    eight = memory.estimate(DEMO, batch_size=8, seq_len=128, mesh_shape=(2, 2, 2))
    assert eight.weights < one.weights / 3  # most weights split 4 ways (fsdp × tensor)
    assert eight.activations < one.activations / 3


def test_remat_chunking_and_bf16_each_lower_the_estimate():
    base = memory.estimate(DEMO, batch_size=8, seq_len=512)
    assert memory.estimate(DEMO, batch_size=8, seq_len=512, remat=True).activations < base.activations / 2
    assert memory.estimate(DEMO, batch_size=8, seq_len=512, compute_dtype="bfloat16").activations \
        == base.activations / 2
    big_vocab = dict(DEMO, num_embed=262_144)
    chunked = memory.estimate(big_vocab, batch_size=4, seq_len=1024)
    full = memory.estimate(big_vocab, batch_size=4, seq_len=1024, chunked_ce=False)
    assert chunked.logits <= memory.LOGITS_COPIES_SCAN * 128 * 2**20 < full.logits / 10


def test_real_gemma3_sizes_come_from_their_configs():
    from gemma import gm

    e = memory.estimate(gm.nn.Gemma3_1B.config, batch_size=4, seq_len=1024, param_dtype="bfloat16",
                        compute_dtype="bfloat16", remat=True, device_bytes=16 * 2**30)
    assert 0.99e9 < e.total_params < 1.01e9  # Gemma 3 1B: 1.0 B params
    assert e.weights == pytest.approx(2 * e.total_params, rel=0.01)
    assert e.verdict == "fits"
    big = memory.estimate(gm.nn.Gemma3_27B.config, batch_size=8, seq_len=4096, device_bytes=16 * 2**30)
    assert big.verdict == "exceeds"


def test_device_memory_is_known_for_cpu_devices():
    import jax

    assert device_memory.device_memory_bytes(jax.devices()[0]) > 2**28


def _cfg(batch: int, length: int, *, remat=False, full=False, mesh=(1, 1, 1)) -> RunConfig:
    return RunConfig(mesh=MeshSpec(*mesh, devices=mesh[0] * mesh[1] * mesh[2]), data=DataSpec(max_length=length),
                     lora=LoraSpec(rank=8, enabled=not full), train=TrainSpec(batch_size=batch, remat=remat))


@pytest.mark.parametrize("cfg", [
    _cfg(8, 128), _cfg(8, 128, remat=True), _cfg(8, 128, full=True), _cfg(8, 128, mesh=(2, 2, 2)),
], ids=["lora", "lora-remat", "full-ft", "lora-2x2x2"])
def test_estimate_is_within_15_percent_of_the_compiled_step(demo, cfg):
    import jax
    import optax

    from adapters_lib import mesh
    from adapters_lib.lora import traced_shapes
    from adapters_lib.train.step import build_steps

    model, base = demo
    trainable = (jax.eval_shape(lambda r: traced_shapes.init_lora(model, cfg.lora, base, r), jax.random.key(0))
                 if cfg.lora.enabled else base)
    steps = build_steps(model, cfg, optax.adamw(1e-3), mesh.make_mesh(cfg.mesh), base, trainable)
    compiled = steps.compiled_memory((cfg.train.batch_size, cfg.data.max_length))
    est = run_estimate.estimate_run(cfg, model.config, device_count=cfg.mesh.devices)
    assert est.total == pytest.approx(compiled["total"], rel=0.15), (est.summary(), compiled)


def _gemma3_1b_run(**lora) -> tuple[RunConfig, object]:
    from adapters_lib.models import families

    _, arch = families.KNOWN[("gemma3", "1b")]
    cfg = RunConfig(data=DataSpec(max_length=2048),
                    train=TrainSpec(batch_size=4, compute_dtype="bfloat16", param_dtype="bfloat16"),
                    lora=LoraSpec(**{"rank": 8, "targets": ("q", "k", "v", "o", "gate", "up", "down"), **lora}),
                    mesh=MeshSpec(devices=1))
    return cfg, arch.transformer_config()


V5E_BYTES = 16_909_336_064  # a v5e chip's bytes_limit, as JAX reports it


def test_auto_takes_the_largest_rank_bucket_that_fits_the_device():
    """The Gemma-3-1B shape at 4 × 2048 on a 16 GiB v5e: a rank-128 family's adapters do not fit
    (XLA asked 15.99 of 15.75 GiB on the chip), so "auto" halves the bucket until one does
    instead of compiling every rank on its own; the estimate is of that program."""
    cfg, config = _gemma3_1b_run()
    family = run_estimate.run_program(cfg, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu")
    assert family is not None and family.program.rank == 32 and family.spec.rank == 8
    full = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, programs="family"))
    padded = run_estimate.estimate_run(full, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu")
    chosen = run_estimate.estimate_run(cfg, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu")
    assert padded.total > V5E_BYTES * run_estimate.FITS >= chosen.total > 0
    # a rank above every bucket that fits: the exact program (it is the smaller)
    big, _ = _gemma3_1b_run(rank=64)
    assert run_estimate.run_program(big, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu") is None
    # room to spare (a v5p's 95 GiB): the platform's bucket; "family" and "exact" are taken as set
    assert run_estimate.run_program(cfg, config, device_count=1, device_bytes=95 << 30, platform="tpu").program.rank == 128
    assert run_estimate.run_program(full, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu").program.rank == 128
    exact = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, programs="exact"))
    assert run_estimate.run_program(exact, config, device_count=1, device_bytes=V5E_BYTES, platform="tpu") is None
