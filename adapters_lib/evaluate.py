"""Exact-match evaluation: greedy answers to the eval split's prompts, compared to the references.

A small batched greedy decoder: prompts are right-padded into a ``[N, T]`` buffer and each
row's arg-max token is appended after its last token. For a gemma Transformer
(``model_apply_fn``) it decodes with a KV cache (``greedy_cache``: one prefill of the
prompts, then one token a step); any other ``apply_fn`` (the Keras route's) re-runs the
model over the whole buffer under a causal mask each step (fixed shape: one compile). The
two give the same tokens in float32 (bfloat16: up to rounding). Generation of a row ends at the end-of-turn marker or EOS. Prompts
are tokenized by the one prompt tokenizer (``sample.prompts.prompt_ids``), as sampling and
training do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from adapters_lib import greedy_cache
from adapters_lib.sample.prompts import codec_of, prompt_ids

log = logging.getLogger(__name__)


def _norm(s: str) -> str:
    return " ".join(s.strip().rstrip(".").split()).lower()


def exact_match_text(prediction: str, answer: str) -> bool:
    """Exact match after trimming whitespace, a trailing full stop and case."""
    return _norm(prediction) == _norm(answer)


@dataclass
class ExactMatch:
    """Exact-match result over a list of chat examples."""

    score: float
    correct: int
    total: int
    per_task: dict[str, float] = field(default_factory=dict)
    samples: list[tuple[str, str, str]] = field(default_factory=list)
    """A few (prompt, reference, prediction) triples, for the log."""

    def to_dict(self) -> dict[str, Any]:
        return {"exact_match": self.score, "correct": self.correct, "total": self.total,
                "per_task": self.per_task}


def split_example(example: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """(prompt messages, reference answer): the reference is the last assistant turn."""
    messages = list(example["messages"])
    last = messages[-1]
    if last["role"] not in ("assistant", "model"):
        raise ValueError("an exact-match example must end with an assistant turn")
    return messages[:-1], str(last["content"])


def _stop_ids(tokenizer: Any) -> set[int]:
    """EOS and the end-of-turn marker of the tokenizer's template (Gemma 2/3 or Gemma 4)."""
    codec = codec_of(tokenizer)
    ids = {codec.eos}
    eot = codec.encode_fixed(codec.markers[1])
    if len(eot) == 1:
        ids.add(int(eot[0]))
    return ids


def greedy_answers(apply_fn: Any, params: Any, tokenizer: Any, encoded: Sequence[list[int]], *,
                   max_new_tokens: int, batch_size: int = 64, max_length: int = 512) -> list[str]:
    """Greedy completions of token-id prompts (decoded text up to the first stop token).

    ``apply_fn(params, tokens, positions, attention_mask) -> logits`` runs the model.
    """
    done = greedy_completions(apply_fn, params, tokenizer, encoded, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, max_length=max_length)
    return [tokenizer.decode(ids) if ids else "" for ids, _ in done]


def greedy_completions(apply_fn: Any, params: Any, tokenizer: Any, encoded: Sequence[list[int]], *,
                       max_new_tokens: int, batch_size: int = 64, max_length: int = 512,
                       ) -> list[tuple[list[int], bool]]:
    """``(generated ids, stopped)`` per prompt: ``stopped`` when a stop token ended it (the stop
    token is not in the ids), False when it ran out of ``max_new_tokens`` or of room."""
    longest = max(len(e) for e in encoded)
    width = min(max_length, longest + max_new_tokens)
    width = -(-width // 8) * 8  # a multiple of 8: fewer distinct shapes across calls
    stop = _stop_ids(tokenizer)
    pieces = getattr(tokenizer, "vocab_size", 0)  # ids beyond it cannot be decoded
    pieces = int((pieces() if callable(pieces) else pieces) or 0)
    cached = greedy_cache.decoder_for(apply_fn)

    results: list[tuple[list[int], bool]] = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        rows = batch_size if len(encoded) > batch_size else len(chunk)
        tokens = np.zeros((rows, width), np.int32)
        lengths = np.ones((rows,), np.int32)
        for i, e in enumerate(chunk):
            e = e[-(width - max_new_tokens):]  # keep the end of an over-long prompt
            tokens[i, :len(e)] = e
            lengths[i] = len(e)
        done = np.zeros((rows,), bool)
        done[len(chunk):] = True
        stopped = np.zeros((rows,), bool)
        out: list[list[int]] = [[] for _ in range(rows)]
        next_tokens = cached and cached.start(params, tokens, lengths, max_new_tokens, limit=pieces)
        if next_tokens is None:  # re-run the whole buffer each step
            full = _next_tokens_fn(apply_fn)

            def next_tokens(tokens, lengths, full=full):
                return full(params, jnp.asarray(tokens), jnp.asarray(lengths), limit=pieces)
        for _ in range(max_new_tokens):
            nxt = np.asarray(next_tokens(tokens, lengths))
            for i in range(rows):
                if done[i]:
                    continue
                t = int(nxt[i])
                if t in stop or lengths[i] >= width:
                    done[i] = True
                    stopped[i] = t in stop
                    continue
                out[i].append(t)
                tokens[i, lengths[i]] = t
                lengths[i] += 1
            if done.all():
                break
        results.extend((out[i], bool(stopped[i])) for i in range(len(chunk)))
    return results


def _next_tokens_fn(apply_fn: Any) -> Any:
    """A jitted "arg-max after each row's last token" for ``apply_fn``, made once per function."""
    cached = getattr(apply_fn, "_greedy_next", None)
    if cached is not None:
        return cached

    @functools.partial(jax.jit, static_argnames=("limit",))
    def next_tokens(p, tokens, lengths, limit=0):
        n, width = tokens.shape
        positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (n, width))
        mask = jnp.broadcast_to(jnp.tril(jnp.ones((width, width), jnp.bool_)), (n, width, width))
        logits = apply_fn(p, tokens, positions, mask)
        last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]
        return greedy_cache.pick(last, limit)

    try:
        apply_fn._greedy_next = next_tokens
    except AttributeError:  # a callable that takes no attributes: no caching
        pass
    return next_tokens


def model_apply_fn(model: Any) -> Any:
    """``apply_fn`` for ``greedy_answers`` over a gemma Transformer (or a LoRA-wrapped one)."""

    def apply(params, tokens, positions, mask):
        out = model.apply({"params": params}, tokens, positions=positions, attention_mask=mask)
        return out.logits

    apply.gemma_model = model  # greedy answers decode it with a KV cache (greedy_cache)
    return apply


def exact_match(model: Any, params: Any, tokenizer: Any, examples: Sequence[dict[str, Any]], *,
                batch_size: int = 64, max_length: int = 512, apply_fn: Any = None) -> ExactMatch:
    """Exact match of greedy answers on chat ``examples`` (model: apply-able; params: its tree).

    Pass the same ``apply_fn`` (``model_apply_fn(model)``) to several calls to compile once.
    """
    if not examples:
        return ExactMatch(0.0, 0, 0)
    prompts, refs, tasks = [], [], []
    codec = codec_of(tokenizer)
    for ex in examples:
        messages, ref = split_example(ex)
        prompts.append(prompt_ids(codec, messages))
        refs.append(ref)
        tasks.append(str(ex.get("task", "all")))
    longest_ref = max(len(tokenizer.encode(r)) for r in refs)
    preds = greedy_answers(apply_fn or model_apply_fn(model), params, tokenizer, prompts,
                           max_new_tokens=longest_ref + 2, batch_size=batch_size,
                           max_length=max_length)
    hits = [exact_match_text(p, r) for p, r in zip(preds, refs, strict=True)]
    per_task: dict[str, list[bool]] = {}
    for task, hit in zip(tasks, hits, strict=True):
        per_task.setdefault(task, []).append(hit)
    samples = [(str(examples[i]["messages"][-2]["content"]), refs[i], preds[i])
               for i in range(min(6, len(preds)))]
    return ExactMatch(
        score=float(np.mean(hits)), correct=int(sum(hits)), total=len(hits),
        per_task={t: float(np.mean(h)) for t, h in per_task.items()}, samples=samples,
    )
