"""A run's final adapters kept in memory (``checkpoints.remember_saved``) make the tuned model the
Compare loads right after the run: folded into the LoRA family on the host and placed in one
transfer call, the run's own tree placed only when asked. The model is the one a read from disk
gives (values, dtypes, placement), and the load's phases are recorded for the warm-up's log."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest


def _same(a, b) -> None:
    import jax

    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.sharding == y.sharding
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(("programs", "dtype"), [("family", ""), ("family", "bfloat16"), ("exact", "")])
def test_the_kept_adapters_load_as_a_read_from_disk_does(tmp_path, monkeypatch, programs, dtype):
    import jax
    from fixtures_generation import perturbed_lora

    from adapters_lib.config import RunConfig, TrainSpec
    from adapters_lib.models.loader import load_model
    from adapters_lib.runs.registry import create_run
    from adapters_lib.train import checkpoints
    from adapters_lib.tuned import phases
    from adapters_lib.tuned.gemma import GemmaTuned

    base = RunConfig(train=TrainSpec(programs=programs, rank_bucket=32))
    cfg = dataclasses.replace(base, lora=dataclasses.replace(base.lora, rank=3, alpha=6.0, targets=("q", "v")))
    run = create_run(cfg, root=tmp_path)
    loaded = load_model(cfg.model_spec(), param_dtype=cfg.train.param_dtype)
    adapters = perturbed_lora(loaded, cfg.lora, seed=4)
    with checkpoints.CheckpointStore(run.checkpoints_dir) as store:
        store.save(2, adapters, adapters, {"loss": 1.0})
    assert checkpoints.remember_saved(run.checkpoints_dir, 2, adapters)

    puts = []
    real_put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.append(1) or real_put(*a, **k))
    with phases.recording() as took:
        kept = GemmaTuned.from_run(run, None, generation_dtype=dtype)
    monkeypatch.setattr(jax, "device_put", real_put)
    assert list(took) == ["config", "base", "adapters", "sides"]
    assert len(puts) == 1  # the served tree in one transfer call (no leaf placed apart)
    assert (kept._adapters is None) == (programs == "family")  # the run's own tree: when asked

    del checkpoints._SAVED[str(run.checkpoints_dir.absolute())]
    read = GemmaTuned.from_run(run, None, generation_dtype=dtype)  # orbax's read
    assert kept.serving_spec == read.serving_spec
    _same(kept.serving_adapters, read.serving_adapters)
    _same(kept.adapters, read.adapters)
    if programs == "exact":
        assert kept.adapters is kept.serving_adapters
    if dtype:
        assert all(x.dtype == np.dtype(jax.numpy.bfloat16) for x in jax.tree.leaves(kept.serving_adapters))


def test_phases_add_up_per_thread_and_nothing_outside_a_recording():
    import threading

    from adapters_lib.tuned import phases

    phases.mark("config")  # no recording: nothing kept, no error
    with phases.recording() as took:
        phases.mark("config")
        threading.Thread(target=phases.mark, args=("base",)).start()  # another thread's: not here
        phases.mark("adapters")
        phases.mark("config")
    assert list(took) == ["config", "adapters"] and all(v >= 0 for v in took.values())
    assert phases.describe(took).startswith("config ") and phases.describe({}) == ""
