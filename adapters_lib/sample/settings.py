"""Decoding settings and the streamed event: plain data, no JAX."""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.errors import WorkbenchError

STOP_REASONS = ("stop", "length", "cancelled")
"""Why a completion ended: the model ended its turn (an end token), ``max_new_tokens`` was
reached, or the client went away."""


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """Decoding settings. ``temperature == 0`` means greedy."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    """Keep the k most likely tokens (0 = off)."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability reaches p (1.0 = off)."""
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise WorkbenchError(f"max_new_tokens is {self.max_new_tokens}", where="--max-new-tokens",
                                 hint="use a positive number of tokens")
        if not self.temperature >= 0 or self.temperature == float("inf"):  # NaN fails too
            raise WorkbenchError(f"temperature is {self.temperature}", where="--temperature",
                                 hint="use 0 (greedy) or a positive, finite temperature")
        if self.top_k < 0:
            raise WorkbenchError(f"top_k is {self.top_k}", where="--top-k", hint="use 0 (off) or a positive k")
        if not 0.0 < self.top_p <= 1.0:
            raise WorkbenchError(f"top_p is {self.top_p}", where="--top-p", hint="use a value in (0, 1]")
        if not 0 <= self.seed < 2**32:
            raise WorkbenchError(f"seed is {self.seed}", where="--seed", hint="use an integer in [0, 2**32)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Piece:
    """One streamed event: new text (possibly empty) for one (variant, prompt) stream.

    The last event of a stream has ``done=True`` and a ``stop_reason`` (``STOP_REASONS``).
    ``side`` names the variant where a tuned model streams it ("base" or "tuned").
    """

    variant: int
    row: int
    text: str
    token: int | None
    done: bool = False
    stop_reason: str | None = None
    side: str = ""
    time: float | None = None
    """``time.perf_counter()`` when its decode step was done (tokens of one device call come
    together; each is stamped at its own step), None: when it arrived."""
