"""Greedy decoding with a KV cache for the evaluation's answers (``evaluate.greedy_completions``).

``decoder_for(apply_fn)`` gives a ``CachedGreedy`` when ``apply_fn`` is
``evaluate.model_apply_fn`` of a gemma Transformer (or a LoRA-wrapped one), else None (the
caller re-runs the whole buffer each step). ``CachedGreedy.start(params, tokens, lengths,
max_new_tokens, limit=)`` returns ``next_tokens(tokens, lengths)`` with the re-running
decoder's contract: the arg-max token after each row's last token (ids from ``limit`` on are
never chosen), the caller appending it. The first call runs the prompts once (a prefill into
the cache), each later one only the token each row appended last, at its own position,
attending to its prompt and the tokens it generated (the padding between them is masked):
the same attention as a causal mask over the whole buffer, one token's work a step instead
of the buffer's (~10× faster answers for the demo model on 2 cores). In float32 the tokens
are the re-running decoder's (tests/test_greedy_cache.py; the demo's 105 eval answers on 1
device and on the 2×4 mesh: all equal); in bfloat16 the different summation order can flip
a near-tie (2 of the 105, measured, with random adapters).

Prompt widths are rounded up to multiples of 8 (few distinct compiles). The cache dtype is
the model's compute dtype: float32 is tried first, then bfloat16; a model neither fits
decodes without a cache.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

_DTYPES = (jnp.float32, jnp.bfloat16)


def decoder_for(apply_fn: Any) -> CachedGreedy | None:
    """The KV-cache decoder of a gemma ``apply_fn`` (made once per function), else None."""
    model = getattr(apply_fn, "gemma_model", None)
    if model is None:
        return None
    decoder = getattr(apply_fn, "_greedy_cached", None)
    if decoder is None:
        decoder = CachedGreedy(model)
        apply_fn._greedy_cached = decoder
    return decoder if decoder.usable else None


def pick(logits: Any, limit: int) -> Any:
    """The arg-max token of ``logits`` ``[..., V]``; ids from ``limit`` on (embedding rows beyond
    the tokenizer) are never chosen (0: no limit)."""
    if 0 < limit < logits.shape[-1]:
        logits = jnp.where(jnp.arange(logits.shape[-1]) < limit, logits, -jnp.inf)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def _round8(n: int) -> int:
    return -(-int(n) // 8) * 8


def _config(model: Any) -> Any:
    """The Transformer config of a gemma model or of the LoRA wrapper around one."""
    while getattr(model, "config", None) is None and getattr(model, "model", None) is not None:
        model = model.model
    return model.config


class CachedGreedy:
    """The compiled prefill and one-token step for one gemma model (see the module doc)."""

    def __init__(self, model: Any):
        self.model = model
        self.config = _config(model)
        self.usable = True
        self.dtype: Any = None
        self._prefill = jax.jit(self._prefill_impl, static_argnames=("cache_len", "limit", "dtype"))
        self._step = jax.jit(self._step_impl, static_argnames=("limit",), donate_argnums=(1,))

    def _prefill_impl(self, params, tokens, lengths, *, cache_len, limit, dtype):
        b, p = tokens.shape
        cache = self.config.init_cache(batch_size=b, dtype=dtype, cache_length=p)
        positions = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
        mask = jnp.broadcast_to(jnp.tril(jnp.ones((p, p), jnp.bool_)), (b, p, p))
        out = self.model.apply({"params": params}, tokens, positions=positions, attention_mask=mask,
                               cache=cache)
        last = jnp.take_along_axis(out.logits, (lengths - 1)[:, None, None], axis=1)[:, 0]
        pad = cache_len - p

        def grow(layer):
            return {"k": jnp.pad(layer["k"], ((0, 0), (0, pad), (0, 0), (0, 0))),
                    "v": jnp.pad(layer["v"], ((0, 0), (0, pad), (0, 0), (0, 0))),
                    "positions": jnp.pad(layer["positions"], ((0, 0), (0, pad))),
                    "end_index": layer["end_index"]}

        return pick(last, limit), {name: grow(layer) for name, layer in out.cache.items()}

    def _step_impl(self, params, cache, tokens, positions, valid, *, limit):
        out = self.model.apply({"params": params}, tokens[:, None], positions=positions[:, None],
                               attention_mask=valid[:, None, :], cache=cache, return_last_only=True)
        return pick(out.logits.reshape(tokens.shape[0], -1), limit), out.cache

    def _first(self, params, tokens, lengths, cache_len, limit):
        """The prefill, in the first dtype the model's key/value projections fit."""
        for dtype in ([self.dtype] if self.dtype is not None else _DTYPES):
            try:
                out = self._prefill(params, tokens, lengths, cache_len=cache_len, limit=limit,
                                    dtype=dtype)
            except TypeError as err:  # the cache's dtype is not the projections'
                log.info("greedy cache: %s does not fit (%s)", jnp.dtype(dtype).name, err)
                continue
            self.dtype = dtype
            return out
        self.usable = False
        return None

    def start(self, params: Any, tokens: np.ndarray, lengths: np.ndarray, max_new_tokens: int, *,
              limit: int = 0) -> Any:
        """``next_tokens(tokens, lengths)`` for these rows (``tokens`` [B, W] host buffer), or
        None when no cache fits the model (then ``usable`` is False)."""
        prompt = _round8(int(lengths.max()))
        cache_len = _round8(prompt + max_new_tokens)
        first_lengths = lengths.copy()
        buf = np.zeros((tokens.shape[0], prompt), np.int32)
        width = min(prompt, tokens.shape[1])
        buf[:, :width] = tokens[:, :width]
        out = self._first(params, jnp.asarray(buf), jnp.asarray(lengths), cache_len, limit)
        if out is None:
            return None
        state = {"next": out[0], "cache": out[1], "fed": -1}
        j = np.arange(cache_len)[None, :]
        prompt_slots = j < first_lengths[:, None]

        def next_tokens(tokens: np.ndarray, lengths: np.ndarray) -> Any:
            state["fed"] += 1
            if state["fed"] == 0:  # the prefill's answer
                return state.pop("next")
            # each row's last token goes into cache slot prompt + fed - 1, at its own position
            # (a finished row's is fed again: its answers are no longer read)
            slot = prompt + state["fed"] - 1
            rows = np.arange(tokens.shape[0])
            last = tokens[rows, lengths - 1].astype(np.int32)
            valid = prompt_slots | ((j >= prompt) & (j <= slot))
            nxt, state["cache"] = self._step(params, state["cache"], jnp.asarray(last),
                                             jnp.asarray((lengths - 1).astype(np.int32)),
                                             jnp.asarray(valid), limit=limit)
            return nxt

        return next_tokens
