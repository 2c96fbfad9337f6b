"""``TunedModel``: one object per (run checkpoint | exported adapter | base model), two sides.

A tuned model has a *base* side (the model it was tuned from) and, unless it is a bare base
model, a *tuned* side. Every consumer goes through it: ``sample`` and ``compare`` (the CLI
in-process and the engine's jobs), multi-turn A/B (``converse``), evaluation
(``apply_fn``/``exact_match``) and export. A backend implements ``stream`` (the pieces of
several prompts on several sides), ``export`` and ``exact_match``; everything else is
built here on ``stream``, once for both backends (``tuned.gemma``, ``tuned.keras``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.sample.prompts import Prompt
from adapters_lib.sample.settings import Piece, SamplingSettings

SIDES = ("base", "tuned")

GENERATION_DTYPES = ("", "float32", "bfloat16")


def generation_dtype_of(asked: str, cfg: Any = None) -> str:
    """The generation copy's dtype: the request's ``asked``, else the run's ``[model]
    generation_dtype``; "" = none (generate from the model as trained)."""
    if asked not in GENERATION_DTYPES:
        from adapters_lib.errors import WorkbenchError

        raise WorkbenchError(f"generation_dtype is {asked!r}", where="--generation-dtype",
                             hint="use float32 or bfloat16")
    return asked or (getattr(getattr(cfg, "model", None), "generation_dtype", "") if cfg is not None else "")


@dataclass
class Answer:
    """One side's completion of one prompt."""

    text: str = ""
    tokens: int = 0
    """Decode steps (the end token included, as the engine counts them)."""
    stop_reason: str | None = None
    seconds: float = 0.0
    """From the start of the computation until this answer was complete."""
    first_token_s: float = 0.0
    """From the start until its first token (prefill, and a first call's compile)."""

    @property
    def tokens_per_s(self) -> float:
        """The decode rate: tokens after the first over the time after the first (a first
        call's compile and the prefill are in ``first_token_s``, not here). 0.0 for an answer
        of one token: nothing was decoded after it (its wait is ``first_token_s``)."""
        decode = self.seconds - self.first_token_s
        if self.tokens > 1 and decode > 0:
            return round((self.tokens - 1) / decode, 2)
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "tokens": self.tokens, "stop_reason": self.stop_reason,
                "seconds": round(self.seconds, 3), "first_token_s": round(self.first_token_s, 3),
                "tokens_per_s": self.tokens_per_s}


PieceHook = Callable[[Piece], bool | None]
"""Called with every piece; returning False stops the generation (the client went away)."""


class TunedModel:
    """The tuned model of a run checkpoint or an adapter folder, or a bare base model."""

    backend: str = "gemma"
    source: str = ""
    """The base model's source (``model.source``)."""
    step: int | None = None
    run_path: Path | None = None
    run_id: str = ""
    has_tuned: bool = True
    """False for a bare base model (``sample --model M``): only the base side."""
    cfg: Any = None
    """The run's config (None for an adapter folder or a base model)."""

    # ---------------------------------------------------------------- to implement

    def stream(self, prompts: Mapping[str, Sequence[Prompt]], settings: SamplingSettings, *,
               chat: bool = True) -> Iterator[Piece]:
        """Pieces of every (side, prompt): ``prompts`` maps a side to its prompts (each side
        the same number of rows; the sides may differ, e.g. each with its own history).
        ``Piece.side`` names the side, ``Piece.row`` the prompt."""
        raise NotImplementedError

    def export(self, fmt: str, out: str | Path | None = None, *, force: bool = False,
               quant: str = "") -> dict[str, Any]:
        """Write ``fmt`` (``export.formats``); ``quant``: the GGUF formats' type."""
        raise NotImplementedError

    def exact_match(self, examples: Sequence[dict[str, Any]], *, side: str = "tuned") -> Any:
        """``evaluate.ExactMatch`` of greedy answers on chat examples, for one side."""
        raise NotImplementedError

    # ---------------------------------------------------------------- built on stream

    def check_sides(self, sides: Sequence[str]) -> None:
        for side in sides:
            if side not in SIDES:
                raise ValueError(f"unknown side {side!r}")
            if side == "tuned" and not self.has_tuned:
                raise WorkbenchError("a base model has no tuned side", where="--run",
                                     hint="name a run (--run) or an adapter folder (--adapter)")

    def generate(self, prompts: Mapping[str, Sequence[Prompt]], settings: SamplingSettings, *,
                 chat: bool = True, on_piece: PieceHook | None = None) -> dict[str, list[Answer]]:
        """Every side's answers, collected; ``on_piece`` sees each piece as it comes and may stop
        the generation (the unfinished answers end with ``stop_reason = "cancelled"``)."""
        self.check_sides(list(prompts))
        t0 = time.perf_counter()
        answers = {side: [Answer() for _ in rows] for side, rows in prompts.items()}
        pieces = self.stream(prompts, settings, chat=chat)
        try:
            for piece in pieces:
                answer = answers[piece.side][piece.row]
                answer.text += piece.text
                at = (piece.time if piece.time is not None else time.perf_counter()) - t0
                if piece.token is not None and answer.tokens == 0:
                    answer.first_token_s = at
                if piece.token is not None:
                    answer.tokens += 1
                    answer.seconds = at  # complete at its last token
                if piece.done:
                    answer.stop_reason = piece.stop_reason or "stop"
                    # in a batch, a row that stopped is told so when the batch ends: its time
                    # (and so its rate) is its own last token's, not the slowest row's
                    answer.seconds = answer.seconds or time.perf_counter() - t0
                if on_piece is not None and on_piece(piece) is False:
                    break
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        now = time.perf_counter() - t0
        for rows in answers.values():
            for answer in rows:
                if answer.stop_reason is None:
                    answer.stop_reason, answer.seconds = "cancelled", now
        return answers

    def sample(self, prompt: Prompt, settings: SamplingSettings, *, chat: bool = True,
               side: str | None = None) -> Iterator[str]:
        """Text pieces of one completion (the tuned side, or the base of a bare base model)."""
        side = side or ("tuned" if self.has_tuned else "base")
        for piece in self.stream({side: [prompt]}, settings, chat=chat):
            if piece.text:
                yield piece.text

    def compare(self, prompts: Sequence[Prompt], settings: SamplingSettings, *, chat: bool = True
                ) -> list[dict[str, Any]]:
        """Base and tuned answers to each prompt: ``[{prompt, base, tuned, settings, step}]``."""
        got = self.generate({"base": list(prompts), "tuned": list(prompts)}, settings, chat=chat)
        return [{"prompt": p if isinstance(p, str) else list(p), "base": b.text, "tuned": t.text,
                 "settings": self.settings_record(settings), "step": self.step}
                for p, b, t in zip(prompts, got["base"], got["tuned"], strict=True)]

    def settings_record(self, settings: SamplingSettings) -> dict[str, Any]:
        """The settings as a compare record keeps them."""
        return settings.to_dict()

    def converse(self, conversations: Sequence[Any], settings: SamplingSettings, *,
                 sides: Sequence[str] = SIDES, chat: bool = True,
                 on_piece: Callable[[int, Piece], bool | None] | None = None) -> list[Any]:
        """Multi-turn A/B: see ``adapters_lib.sample.conversation.replay``."""
        from adapters_lib.sample.conversation import replay

        return replay(self, conversations, settings, sides=sides, chat=chat, on_piece=on_piece)

    def precision(self, side: str) -> dict[str, str]:
        """What ``side`` ran on: the weights' ``dtype`` and the base's ``quantize`` ("" where the
        backend does not say)."""
        return {"dtype": "", "quantize": "none"}

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "source": self.source, "step": self.step,
                "run_id": self.run_id or None, "has_tuned": self.has_tuned}
