"""A/B decode timing: prefill and decode compiled once per length bucket (a new prompt of the
bucket traces nothing, a first generation included), the decode compiled before the first
token, so the decode rate holds no compile."""

from __future__ import annotations

from adapters_lib.sample.sampler import Sampler
from adapters_lib.sample.settings import SamplingSettings


def test_a_new_prompt_of_the_same_bucket_traces_nothing_after_the_first_generation(demo_lora):
    loaded, spec, lora = demo_lora
    sampler = Sampler.from_loaded(loaded, spec)
    settings = SamplingSettings(max_new_tokens=12, temperature=0.0, seed=3)
    pieces = sampler.stream_grid(["hi"], [None, lora], settings)
    next(pieces)
    # the decode for these shapes was compiled before the first token came out
    assert sampler._program._decoders
    list(pieces)
    traces = dict(sampler.traces)
    grid = sampler.generate_grid(["a longer prompt, still in the first bucket"], [None, lora], settings)
    assert sampler.traces == traces  # base and tuned in one program, nothing traced again
    assert all(cell["steps"] > 0 for side in grid for cell in side)


def test_the_decode_rate_counts_decode_steps_only(demo_lora):
    """Tokens of one device call arrive together; each is stamped at its own step, so a side
    that stops inside a chunk gets its own rate, and the first token's wait is apart."""
    from adapters_lib.tuned.gemma import GemmaTuned

    loaded, spec, lora = demo_lora
    model = GemmaTuned(loaded, lora=spec, adapters=lora)
    got = model.generate({"base": ["hello"], "tuned": ["hello"]},
                         SamplingSettings(max_new_tokens=20, temperature=0.0))
    for side in ("base", "tuned"):
        answer = got[side][0]
        assert answer.tokens > 1 and 0 < answer.first_token_s < answer.seconds
        assert answer.tokens_per_s == round((answer.tokens - 1) / (answer.seconds - answer.first_token_s), 2)
