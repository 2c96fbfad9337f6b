"""The sampler's programs serve a family of LoRA configs and every decode setting:
another rank, alpha or targets, ``max_new_tokens`` or temperature compiles nothing, the
family's answers are the exact program's, and a compile ahead serves the call."""

from __future__ import annotations

import concurrent.futures
import dataclasses

import pytest
from fixtures_generation import perturbed_lora

PROMPTS = ["Is 5 even or odd?", "Reverse the words: apple river stone"]


def _family(spec, bucket: int = 16):
    from adapters_lib.lora import family as lora_family

    return lora_family.resolve(spec, programs="family", platform="cpu", bucket=bucket)


def _served(loaded, spec, adapters, bucket: int = 16):
    from adapters_lib.sample import Sampler
    from adapters_lib.sample.family import in_family

    family = _family(spec, bucket)
    return Sampler.from_loaded(loaded, family.program), in_family(loaded.model, family, adapters)


def _settings(**kw):
    from adapters_lib.sample import SamplingSettings

    return SamplingSettings(**{"max_new_tokens": 16, **kw})


def _logits(loaded, spec, adapters):
    import jax.numpy as jnp

    from adapters_lib import lora

    tokens = jnp.asarray([[2, 818, 5279, 529, 7001, 563]]) % loaded.model.config.num_embed
    net = lora.wrap(loaded.model, spec)
    return net.apply({"params": lora.merge_lora(loaded.params, adapters)}, tokens).logits


def test_the_family_program_answers_as_the_exact_one(demo_lora):
    import numpy as np

    from adapters_lib.sample import Sampler

    loaded, spec, _ = demo_lora
    own = dataclasses.replace(spec, rank=2, alpha=7.0, targets=("q", "v", "down"))  # padded, masked
    trained = perturbed_lora(loaded, own, seed=5)
    exact = Sampler.from_loaded(loaded, own).ab(PROMPTS, trained, _settings(max_new_tokens=8))
    sampler, folded = _served(loaded, own, trained)
    assert sampler.ab(PROMPTS, folded, _settings(max_new_tokens=8)) == exact  # greedy tokens, both sides
    assert exact[0]["base"] != exact[0]["tuned"]
    np.testing.assert_allclose(_logits(loaded, _family(own).program, folded), _logits(loaded, own, trained),
                               rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_family_fold_on_the_host_is_the_devices_fold(demo_lora, dtype):
    """A checkpoint's adapters are folded in numpy (at the run's own rank, then padded) and
    placed once (on a TPU the eager pad, multiply and cast compiled per new shape): the very
    values, dtype and placement; from a host tree (a run's final adapters kept in memory) too,
    and from a tree already at the bucket's rank (folded after the padding)."""
    import jax
    import numpy as np

    from adapters_lib.lora import family as lora_family
    from adapters_lib.lora import traced_shapes
    from adapters_lib.sample.family import in_family

    loaded, spec, _ = demo_lora
    own = dataclasses.replace(spec, rank=3, alpha=5.0, targets=("k", "gate"))  # padded and masked
    trained = jax.tree.map(lambda x: x.astype(dtype), perturbed_lora(loaded, own, seed=11))
    family = _family(own)
    on_device = in_family(loaded.model, family, trained, host=False)
    padded = jax.tree.map(lambda x: x.astype(dtype), lora_family.fit(trained, traced_shapes.adapter_shapes(
        loaded.model, family.program)))
    for got in (in_family(loaded.model, family, trained, host=True),
                in_family(loaded.model, family, jax.device_get(trained)),
                in_family(loaded.model, family, padded, host=True)):
        assert jax.tree.structure(got) == jax.tree.structure(on_device)
        for h, d in zip(jax.tree.leaves(got), jax.tree.leaves(on_device), strict=True):
            assert isinstance(h, jax.Array) and h.dtype == d.dtype == np.dtype(jax.numpy.dtype(dtype))
            assert h.shape == d.shape and h.sharding.is_equivalent_to(d.sharding, h.ndim)
            np.testing.assert_array_equal(np.asarray(h), np.asarray(d))
    assert any(np.any(np.asarray(x)) for x in jax.tree.leaves(on_device))


def test_another_rank_alpha_or_targets_reuses_the_family_programs(demo_lora):
    loaded, spec, adapters = demo_lora
    sampler, folded = _served(loaded, spec, adapters)
    sampler.ab(PROMPTS, folded, _settings())
    before = dict(sampler.traces)
    for own in (dataclasses.replace(spec, rank=8, alpha=3.0),
                dataclasses.replace(spec, rank=16, alpha=32.0, targets=("q", "v"))):
        other, other_folded = _served(loaded, own, perturbed_lora(loaded, own, seed=3))
        assert other._program is sampler._program  # one program for the family
        other.ab(PROMPTS, other_folded, _settings())
    assert sampler.traces == before


def test_changing_max_new_tokens_or_sampling_settings_compiles_nothing(demo_lora):
    from adapters_lib.sample.sampler import CACHE_MIN, cache_length

    loaded, spec, adapters = demo_lora
    # the family's programs of the tests above (alone: compiled by this first call); what is
    # compiled when ``before`` is read serves every setting below
    sampler, folded = _served(loaded, spec, adapters)
    sampler.ab(PROMPTS, folded, _settings(max_new_tokens=4))
    before = dict(sampler.traces)
    for kw in ({"max_new_tokens": 40}, {"max_new_tokens": 12, "temperature": 0.8, "top_k": 5, "seed": 2},
               {"max_new_tokens": 9, "temperature": 1.3, "top_p": 0.9}):
        sampler.ab(PROMPTS, folded, _settings(**kw))
    assert sampler.traces == before
    assert cache_length(32, 4) == cache_length(32, 480) == CACHE_MIN < cache_length(32, 481)


def test_a_compile_ahead_serves_the_call_and_a_dropped_one_leaves_it_to_compile(demo_lora):
    loaded, spec, adapters = demo_lora
    sampler, folded = _served(loaded, spec, adapters, bucket=64)  # a program no other test made
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = sampler.compile_behind(pool.submit, [None, folded], _settings(), prompt_bucket=32, rows=2)
        future.result()
    compiled = dict(sampler.traces)
    assert compiled == {"prefill": 1, "decode": 1}
    assert sampler.compile_behind(pool.submit, [None, folded], _settings(), rows=2) is None  # ready: nothing queued
    first = sampler.ab(PROMPTS, folded, _settings(max_new_tokens=30))  # any decode length: the same
    assert sampler.traces == compiled  # the call ran what was compiled ahead

    def dropped(fn):
        f = concurrent.futures.Future()
        f.cancel()
        return f

    assert sampler.compile_behind(dropped, [None, folded], _settings(), prompt_bucket=64, rows=1).cancelled()
    long = ["Say the whole alphabet, then count from one to twenty, please, slowly and clearly."]
    assert sampler.ab(long, folded, _settings())[0]["tuned"]  # compiled by the call (bucket 64)
    assert sampler.traces["prefill"] == compiled["prefill"] + 1 and first


@pytest.mark.parametrize("programs", ["family", "auto"])
def test_a_runs_tuned_model_serves_its_family_where_train_programs_asks(demo_lora, programs):
    from adapters_lib.config import RunConfig, TrainSpec
    from adapters_lib.tuned.gemma import GemmaTuned

    loaded, spec, adapters = demo_lora
    cfg = RunConfig(lora=spec, train=TrainSpec(programs=programs))
    tuned = GemmaTuned(loaded, lora=spec, adapters=adapters, cfg=cfg)
    assert tuned.serving_spec == (_family(spec).program if programs == "family" else spec)  # CPU: auto = exact
    assert tuned.adapters is adapters  # what export writes: the run's own
