"""The evaluation's KV-cache greedy decoder gives the tokens of the decoder that re-runs the
whole buffer each step (``adapters_lib.greedy_cache`` vs ``evaluate``'s causal-mask loop)."""

from __future__ import annotations


def _completions(apply_fn, params, tokenizer, prompts, **kw):
    from adapters_lib import evaluate

    return evaluate.greedy_completions(apply_fn, params, tokenizer, prompts, **kw)


def test_cached_greedy_answers_equal_re_running_the_whole_buffer(demo_lora):
    from adapters_lib import evaluate, greedy_cache
    from adapters_lib import lora as lora_lib
    from adapters_lib.sample.prompts import prompt_ids

    loaded, spec, adapters = demo_lora
    tok = loaded.tokenizer
    # prompts of different lengths (padding between a row's prompt and its answer), some
    # longer than the room left (cut from the front), more rows than a batch (a padded chunk:
    # rows that are done from the start). Where a row stops is the shared loop's (the same
    # code for both decoders); what differs is only how each next token is computed.
    texts = ["Is 5 even or odd?", "Reverse the words: apple river stone sea sky",
             "Say the first word: violet pepper piano", "hi", "Which is larger, 76 or 81? " * 6,
             "Sort the letters: dcba"]
    prompts = [prompt_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    # the LoRA-wrapped model, as a run's eval answers with it (the wrapper holds the config)
    model = lora_lib.wrap(loaded.model, spec)
    params = lora_lib.merge_lora(loaded.params, adapters)
    cached_fn = evaluate.model_apply_fn(model)
    full_fn = evaluate.model_apply_fn(model)
    del full_fn.gemma_model  # any other apply_fn (the Keras route's): the re-running decoder
    assert greedy_cache.decoder_for(cached_fn) is not None and greedy_cache.decoder_for(full_fn) is None
    kw = {"max_new_tokens": 8, "batch_size": 4, "max_length": 40}
    got = _completions(cached_fn, params, tok, prompts, **kw)
    want = _completions(full_fn, params, tok, prompts, **kw)
    assert got == want
    assert len({tuple(ids) for ids, _ in want}) > 2  # varied answers, not one token repeated
    assert greedy_cache.decoder_for(cached_fn).usable  # the cache was used, not the fallback
