"""Sampling, compare and eval on Gemma 4 and Gemma 3n: the sampler's cached decode through the
KV-shared layers equals decoding without a cache (peers' users saw garbage there), the prompt
is the family's own template, ``<turn|>`` (106) ends a Gemma 4 answer, exact match stops there."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def samplers(gemma4_tiny, gemma3n_tiny, gemma4_tokenizer):
    """(sampler, params) for the E-style Gemma 4 (its tokenizer: ``<|turn>``/``<turn|>``) and the
    Gemma 3n (the demo tokenizer: Gemma 3's markers)."""
    from adapters_lib.models import demo, families
    from adapters_lib.sample import Sampler

    out = {}
    for name, (arch, model, params), tok in (("gemma4", gemma4_tiny["e"], gemma4_tokenizer),
                                             ("gemma3n", gemma3n_tiny, str(demo.ensure_demo_tokenizer()))):
        out[name] = Sampler(model, params, families.tokenizer_for(arch.family, tok)), params
    return out


def _greedy_without_cache(model, params, prompt: list[int], steps: int, stops: tuple[int, ...]) -> list[int]:
    """Greedy tokens by the full forward over the whole text at every step (no KV cache): one
    fixed-width buffer, the prediction read at the last real position (causal attention)."""
    import jax
    import jax.numpy as jnp

    width = len(prompt) + steps
    forward = jax.jit(lambda p, t: model.apply({"params": p}, t).logits)
    tokens = list(prompt)
    out: list[int] = []
    for _ in range(steps):
        buf = np.zeros((1, width), np.int32)
        buf[0, : len(tokens)] = tokens
        nxt = int(np.argmax(np.asarray(forward(params, jnp.asarray(buf)))[0, len(tokens) - 1]))
        if nxt in stops:
            break
        out.append(nxt)
        tokens.append(nxt)
    return out


@pytest.mark.parametrize("family", ["gemma4", "gemma3n"])
def test_cached_decode_through_kv_shared_layers_equals_decoding_without_a_cache(samplers, family):
    """The sampler's and exact match's cached decoders give the tokens of the uncached forward."""
    from adapters_lib import evaluate, greedy_cache
    from adapters_lib.sample import SamplingSettings

    sampler, params = samplers[family]
    prompt = "Reverse the words: apple river stone"
    settings = SamplingSettings(max_new_tokens=12)
    [[row]] = sampler.generate_grid([prompt], [None], settings)
    want = _greedy_without_cache(sampler.model, params, sampler.encode(prompt), 12, sampler.end_tokens)
    assert row["tokens"] == want
    assert len(want) >= 4  # it generated: the comparison is not empty
    apply_fn = evaluate.model_apply_fn(sampler.model)
    assert greedy_cache.decoder_for(apply_fn) is not None  # the cached decoder, not the re-running one
    [(answer, _)] = evaluate.greedy_completions(apply_fn, params,
                                                sampler.tokenizer, [sampler.encode(prompt)], max_new_tokens=12)
    assert answer == want  # exact match's own cached decoder (greedy_cache)


def test_the_gemma4_prompt_is_its_template_and_turn_end_stops_the_answer(samplers):
    """The prompt is ``<|turn>user … <turn|>\\n<|turn>model\\n``; with the model made to answer
    ``<turn|>`` first, the answer ends there: empty, stopped, and exact match stops on it too."""
    import jax
    import jax.numpy as jnp

    from adapters_lib import evaluate
    from adapters_lib.sample import SamplingSettings

    sampler, params = samplers["gemma4"]
    ids = sampler.encode("hello")
    assert sampler.tokenizer.decode(ids) == "<|turn>user\nhello<turn|>\n<|turn>model\n"
    assert 106 in sampler.end_tokens and 106 in evaluate._stop_ids(sampler.tokenizer)  # noqa: SLF001
    raw = sampler.encode("apple river stone", chat=False)
    assert 106 not in raw
    out = sampler.model.apply({"params": params}, jnp.asarray([raw]), return_hidden_states=True)
    last = np.asarray(out.hidden_states)[0, -1]
    table = np.array(params["embedder"]["input_embedding"])
    table[106] = 40.0 * last / np.linalg.norm(last)  # its logit 40·|h|: past every other
    forced = jax.tree.map(lambda x: x, params)
    forced["embedder"] = {**params["embedder"], "input_embedding": table}
    sampler.params = forced
    try:
        [[row]] = sampler.generate_grid(["apple river stone"], [None], SamplingSettings(max_new_tokens=6),
                                        chat=False)
    finally:
        sampler.params = params
    assert (row["tokens"], row["text"], row["stop_reason"]) == ([], "", "stop")
