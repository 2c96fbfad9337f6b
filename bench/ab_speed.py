"""A/B pair speed: our batched A/B against two sequential ``gm.text.Sampler`` calls.

Moved here from ``adapters_lib/sample.py`` (bench code lives in ``bench/``); the
``ab_pair`` measure (``bench/measures.py``) calls it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from adapters_lib.config import LoraSpec
from adapters_lib.sample import Sampler, SamplingSettings, format_chat


def measure_ab_speed(loaded: Any, spec: LoraSpec, lora: Any, prompts: Sequence[str], *,
                     max_new_tokens: int = 64, repeats: int = 5, ref_cache_length: int = 512) -> dict[str, Any]:
    """A/B pair tokens/s, ours (one batched computation) vs two sequential ``gm.text.Sampler`` calls.

    Greedy, the same prompts and stop tokens on both sides; tokens counted the same way
    (every generated token, the end token included). Median of ``repeats`` after one
    warm-up each, the two sides alternating.
    """
    import statistics

    from gemma import gm

    from adapters_lib import lora as lora_lib

    settings = SamplingSettings(max_new_tokens=max_new_tokens)
    ours = Sampler.from_loaded(loaded, spec)
    texts = [format_chat([{"role": "user", "content": p}]) for p in prompts]  # the reference's input
    # pad_length=None: the reference prefills the prompt unpadded (its strongest setting here;
    # the default pads every prompt to 256 tokens)
    ref_kwargs = dict(tokenizer=loaded.tokenizer, cache_length=ref_cache_length,
                      max_out_length=max_new_tokens, pad_length=None)
    ref_base = gm.text.Sampler(model=loaded.model, params=loaded.params, **ref_kwargs)
    ref_tuned = gm.text.Sampler(model=lora_lib.wrap(loaded.model, spec),
                                params=lora_lib.merge_lora(loaded.params, lora), **ref_kwargs)

    def run_ours() -> int:
        grid = ours.generate_grid(texts, [None, lora], settings, chat=False)  # the same ids
        return sum(c["steps"] for row in grid for c in row)

    def run_ref() -> int:
        n = 0
        for s in (ref_base, ref_tuned):
            out = s.sample(texts, max_new_tokens=max_new_tokens, return_state=True)
            n += int((out.state.predicted_tokens != 0).sum())
        return n

    def timed(fn) -> tuple[float, int]:
        t0 = time.perf_counter()
        n = fn()
        return time.perf_counter() - t0, n

    timed(run_ours), timed(run_ref)  # warm-up (compile)
    ours_t, ref_t = [], []
    for _ in range(repeats):  # alternate, so drifts hit both sides alike
        t, n_ours = timed(run_ours)
        ours_t.append(n_ours / t)
        t, n_ref = timed(run_ref)
        ref_t.append(n_ref / t)
    o, r = statistics.median(ours_t), statistics.median(ref_t)
    return {"ours_tokens_per_s": o, "ref_tokens_per_s": r, "ratio": o / r,
            "prompts": len(prompts), "max_new_tokens": max_new_tokens, "repeats": repeats}
