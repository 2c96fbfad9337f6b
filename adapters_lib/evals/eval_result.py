"""The result of an evaluation (loss / perplexity on a data file): one record for the
library (``perplexity.evaluate``), the engine's reply (``api.Eval.reply``) and ``eval --json``
(contract: ``loss``, ``perplexity``, ``tokens``). Light: the engine API imports it.
"""

from __future__ import annotations

import dataclasses

from adapters_lib.jsontypes import Record, record


@record
class EvalResult(Record):
    """``eval --json`` (contract: ``loss``, ``perplexity``, ``tokens``) and its details."""

    loss: float = 0.0
    """Mean negative log-likelihood per scored token (nats)."""
    perplexity: float = 0.0
    tokens: int = 0
    """Tokens scored (for chat files: the model turns only)."""
    sequences: int = 0
    examples: int = 0
    dropped: int = 0
    """Examples the data rules dropped (each named in ``issues``)."""
    format: str = ""
    loss_on: str = "model"
    max_length: int = 0
    seconds: float = 0.0
    model: str = ""
    run: str | None = None
    step: int | None = None
    data: str = ""
    issues: list[str] = dataclasses.field(default_factory=list)
    scored: str = ""
    """Which tokens count, BOS/EOS named with their ids (``perplexity.scored_words``)."""
    bos_id: int | None = None
    """The BOS put in front of each sequence (context, never scored)."""
    eos_id: int | None = None
    eos_scored: bool = False
    """Text: an EOS is appended to each text and scored (keras-hub's BOS + text + EOS)."""
