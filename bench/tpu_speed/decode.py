"""``decode``: A/B decode at the 1B shape (base and tuned in one batched computation) against
two plain ``gm.text.Sampler`` loops, tokens/s a side."""

from __future__ import annotations

import os
from pathlib import Path

from bench.tpu_speed import shapes
from bench.tpu_speed.results import _dump, _row
from bench.tpu_speed.shapes import random_params, shape_model


def decode(out: Path) -> list[dict]:
    """A/B decode at the 1B shape: ours (base and tuned in one batched computation) against two
    sequential ``gm.text.Sampler`` loops, greedy, the same prompts, tokens/s a side."""
    import jax
    from gemma import gm

    from adapters_lib import lora
    from adapters_lib.config import LoraSpec
    from adapters_lib.models.loaded import LoadedModel
    from bench.ab_speed import measure_ab_speed

    path = os.environ.get("TOKENIZER", ".tpu/extra/tokenizer.model")
    if shapes.DRY:
        from adapters_lib.models.loader import load_model
        from bench.measures import _cfg

        loaded = load_model(_cfg().model, param_dtype="bfloat16")
    else:
        model = shape_model("1b")
        loaded = LoadedModel(model=model, params=random_params(model), source="random Gemma-3-1B shape",
                             tokenizer=gm.text.Gemma3Tokenizer(path=path), tokenizer_path=path)
    spec = LoraSpec(rank=16, alpha=32.0, targets=("all",))
    adapters = lora.init_lora(loaded.model, spec, loaded.params, jax.random.key(1))
    adapters = jax.tree.map(lambda x: x + 0.01, adapters)  # a tuned side that differs from the base
    prompts = ["Write a short story about a lighthouse keeper.", "Explain how a bicycle stays upright.",
               "List five uses of a paperclip.", "What should I pack for a week of hiking?"]
    new = 16 if shapes.DRY else 128
    r = measure_ab_speed(loaded, spec, adapters, prompts, max_new_tokens=new, repeats=2 if shapes.DRY else 3,
                         ref_cache_length=1024)
    rows = [_row("A/B decode, Gemma-3-1B shape", per_side_ours=r["ours_tokens_per_s"] / 2,
                 per_side_ref=r["ref_tokens_per_s"] / 2, **r)]
    _dump(out, "decode", rows)
    return rows
