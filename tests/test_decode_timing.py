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


def _weight_copies(compiled, loaded) -> int:
    """Copies in a compiled program whose output has a projection weight's size."""
    import re

    import jax

    # a weight's shape, its dims in any order: not merely its size (a 512-slot KV cache has the
    # kv projection's)
    shapes = {tuple(sorted(x.shape)) for path, x in jax.tree_util.tree_leaves_with_path(loaded.params)
              if "einsum" in jax.tree_util.keystr(path) and x.ndim >= 2}
    found = 0
    for m in re.finditer(r"%copy\S* = \w+\[([\d,]*)\]", compiled.as_text()):
        dims = [int(d) for d in m.group(1).split(",") if d]
        found += tuple(sorted(dims)) in shapes if dims else 0
    return found


def test_a_generation_copy_decodes_without_copying_a_weight_per_token_and_the_same_tokens(demo_lora):
    """The decode layout (models.decode_layout): the plain model's decode copies its projection
    weights inside the loop (what the real 270M's profile showed: over half a decode step);
    the generation copy's decode copies none, and decodes the same greedy tokens."""
    import dataclasses

    from adapters_lib.models.loader import generation_copy

    loaded, spec, lora = demo_lora
    copy = generation_copy(loaded, "float32")
    settings = SamplingSettings(max_new_tokens=12, temperature=0.0)
    prompts = ["Is 7 even or odd?"]  # the first test's shapes: the plain programs are compiled
    got = {}
    for name, model in (("plain", loaded), ("copy", dataclasses.replace(copy))):
        sampler = Sampler.from_loaded(model, spec)
        grid = sampler.generate_grid(prompts, [None, lora], settings)
        got[name] = [[cell["tokens"] for cell in side] for side in grid]
        got[name + " copies"] = [_weight_copies(c, loaded) for c in sampler._program._decoders.values()]
    assert all(n > 0 for n in got["plain copies"])  # the detector sees them where they are
    assert got["copy copies"] and not any(got["copy copies"])
    assert got["copy"] == got["plain"]


def test_an_answer_of_one_token_has_no_decode_rate():
    """Its one token's wait is the first-token latency, not decoding (#31.3: the tuned pane
    said "3 tokens · 0.2 tok/s" when that wait counted as decoding)."""
    from adapters_lib.tuned.base import Answer

    assert Answer(tokens=1, seconds=0.5, first_token_s=0.5).tokens_per_s == 0.0
    assert Answer(tokens=3, seconds=0.5, first_token_s=0.3).tokens_per_s == 10.0
    assert Answer().tokens_per_s == 0.0
