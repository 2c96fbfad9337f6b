"""A run's plan before its first step (``train.plan``): the loss positions its batches need are
read first, so no batch compiles a program in the foreground mid-run on an accelerator."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import optax
import pytest

from adapters_lib import mesh
from adapters_lib.config import DataSpec, LoraSpec, MeshSpec, RunConfig, TrainSpec
from adapters_lib.train import step as step_lib
from adapters_lib.train import step_programs

L = 32
ONE = MeshSpec(data=1, fsdp=1, tensor=1, devices=1)


def _answer_only(batch: dict, keep: int) -> dict:
    """``batch`` with its loss on the last ``keep`` positions of each row only."""
    out = dict(batch)
    mask = np.zeros_like(batch["loss_mask"])
    mask[:, -keep:] = batch["loss_mask"][:, -keep:]
    out["loss_mask"] = mask
    return out


def test_a_wider_batch_mid_run_runs_in_the_runs_widest_program_compiled_first(demo, lora_params, make_batch):
    model, base = demo
    cfg = RunConfig(mesh=ONE, data=DataSpec(max_length=L), lora=LoraSpec(rank=4), train=TrainSpec(batch_size=8))
    step_programs.forget()
    try:
        steps = step_lib.build_steps(model, cfg, optax.sgd(0.1), mesh.make_mesh(ONE), base,
                                     lora_params(cfg.lora), ce_chunk=8, compile_behind=True)
        narrow = _answer_only(make_batch(8, L, seed=3, packed=True), 8)
        wide = make_batch(8, L, seed=4, packed=True)
        steps.run_slots = max(steps.slots_for(narrow), steps.slots_for(wide))  # what plan_run reads
        assert steps.slots_for(narrow) < steps.run_slots
        state = steps.init_state(lora_params(cfg.lora))
        state, _ = steps.train_step(state, steps.put_batch(narrow))  # compiles the widest, its own behind
        compiled = steps._train.jitted._cache_size()
        assert ("train", (8, L), steps.run_slots) in steps._compiled
        state, m = steps.train_step(state, steps.put_batch(wide))  # the wider batch: nothing compiles
        assert steps._train.jitted._cache_size() == compiled
        assert np.isfinite(float(m["loss"]))
        concurrent.futures.wait(list(steps._train.pending.values()), timeout=300)
    finally:
        step_programs.forget()


def test_the_plan_reads_the_widest_loss_positions_of_the_runs_batches(demo_data_pipeline):
    from adapters_lib.train.plan import widest_slots

    pipeline, steps = demo_data_pipeline
    want = max(steps.slots_for(pipeline.train_batch(s)) for s in range(12))
    assert widest_slots(steps, pipeline, 12) == want
    assert widest_slots(steps, pipeline, 12, budget=-1.0) == pipeline.max_length  # out of time: all


@pytest.fixture(scope="module")
def demo_data_pipeline(demo, lora_params):
    from adapters_lib.data import build_pipeline
    from adapters_lib.models.demo import demo_tokenizer

    model, base = demo
    cfg = RunConfig(mesh=ONE, data=DataSpec(max_length=64), lora=LoraSpec(rank=4), train=TrainSpec(batch_size=4))
    steps = step_lib.build_steps(model, cfg, optax.sgd(0.1), mesh.make_mesh(ONE), base, lora_params(cfg.lora))
    return build_pipeline(cfg.data, demo_tokenizer(), batch_size=4, seed=0), steps
