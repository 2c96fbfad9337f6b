"""What the Compare screen sends and reads: its decoding inputs as the API's fields, the
checkpoint picker's choices and the idle line, the token stream's items and the per-side
figures of a finished one. Earlier compares come from the
engine (``client.compares``: it reads the run's ``compare/*.jsonl`` where the run is, so a
remote engine's too)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from adapters_lib.engine import api
from workbench.widgets.lora_form import parse_number

DECODING = {f.name: f"{f.default:g}" if isinstance(f.default, float) else str(f.default)
            for f in fields(api.Decoding) if f.name in ("temperature", "max_new_tokens", "seed")}
"""The Compare screen's decoding inputs and their defaults: the API's (``api.Decoding``, the
one record of the generation settings)."""

STOP_WORDS = {"stop": "end of turn", "length": "max new tokens", "cancelled": "cancelled"}
"""The engine's ``stop_reason`` values as the pane's frame says them."""


LATEST = -1
"""The checkpoint picker's "latest" (the run's newest checkpoint when it is sent)."""


def checkpoint_options(checkpoints: list[int], best_step: int | None) -> list[tuple[str, int]]:
    """The checkpoint picker's choices: latest, then every step, newest first, the best one
    starred."""
    latest = f"latest ({checkpoints[-1]})" if checkpoints else "latest"
    return [(latest, LATEST)] + [(f"step {s} ★ best" if s == best_step else f"step {s}", s)
                                 for s in reversed(checkpoints)]


def idle_line(earlier: int, checkpoints: int) -> str:
    """What the wait line says before a compare: the earlier ones to walk, or the checkpoints."""
    if earlier:
        return (f"[dim]{earlier} earlier compare{'s' if earlier != 1 else ''} of this run: "
                "escape, then \\[ and ] walk them[/]")
    return f"[dim]{checkpoints} checkpoint(s) · the tuned side uses the one picked above[/]"


def decoding_fields(texts: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The decoding inputs' texts (``DECODING``'s keys; empty = the default) as request fields,
    and the words of the bad ones."""
    values = {k: parse_number(texts.get(k) or DECODING[k], float if k == "temperature" else int)
              for k in DECODING}
    t, n, seed = values["temperature"], values["max_new_tokens"], values["seed"]
    bad = [word for word, ok in (("temperature", isinstance(t, float) and t >= 0),
                                 ("max new tokens", isinstance(n, int) and 0 < n <= api.LIMITS["max_new_tokens"]),
                                 ("seed", isinstance(seed, int))) if not ok]
    return values, bad


def side_stats(summary: Mapping[str, Any], side: str) -> str:
    """``"12 tokens · 41.5 tok/s · first 0.4 s · stop: end of turn"`` for one side of a finished
    compare: the decode rate and the wait for the first token apart."""
    parts = []
    tokens = _per_side(summary, "tokens", side)
    if isinstance(tokens, int):
        parts.append(f"{tokens} token" + ("" if tokens == 1 else "s"))
    speed = _per_side(summary, "tokens_per_s", side)
    if isinstance(speed, (int, float)) and not (isinstance(tokens, int) and tokens < 2):  # no decode
        parts.append(f"{speed:.1f} tok/s")
    first = _per_side(summary, "first_token_s", side)
    if isinstance(first, (int, float)):
        parts.append(f"first {first:.1f} s")
    reason = _per_side(summary, "stop_reason", side)
    if reason:
        parts.append(f"stop: {STOP_WORDS.get(str(reason), str(reason).replace('_', ' '))}")
    return " · ".join(parts)


DTYPE_WORDS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def precision_words(summary: Mapping[str, Any], side: str) -> str:
    """``"bf16"``, ``"f32 · int8"``: the weights a side ran on (its pane's title says it)."""
    dtype = _per_side(summary, "dtype", side)
    quant = _per_side(summary, "quantize", side)
    words = [DTYPE_WORDS.get(str(dtype), str(dtype))] if dtype else []
    if quant and quant != "none":
        words.append(str(quant))
    return " · ".join(words)


def _per_side(summary: Mapping[str, Any], key: str, side: str) -> Any:
    value = summary.get(key)
    return value.get(side) if isinstance(value, Mapping) else None


def done_stats(done: api.CompareDone, side: str) -> str:
    """``side_stats`` of a compare the engine just finished."""
    return side_stats({"tokens": done.tokens, "tokens_per_s": done.tokens_per_s,
                       "first_token_s": done.first_token_s, "stop_reason": done.stop_reason}, side)


def done_frame(done: api.CompareDone, side: str, title: str) -> tuple[str, str]:
    """A finished side's pane title (its side and model, what it ran on) and subtitle."""
    ran = precision_words({"dtype": done.dtype, "quantize": done.quantize}, side)
    return " · ".join(x for x in (title, ran) if x), done_stats(done, side)


def token_side(item: api.StreamItem) -> tuple[str, str]:
    """(side, text) of one compare stream item (``api.COMPARE_ITEMS``); side is base, tuned,
    done or error."""
    if item.type == "done":
        return "done", ""
    if item.type == "error":
        return "error", item.data.message
    return item.data.side or "", item.data.text


def blank_words(text: str) -> str:
    """``"64 line breaks"``: what an answer of blank space holds."""
    breaks = text.count("\n")
    spaces = len(text) - breaks
    return " and ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in
                        ((breaks, "line break"), (spaces, "space")) if n)
