"""Computing commands beyond sample/compare (gen, #18.1 / #20.3): the compare set, eval.

``gemma-workbench compare`` sends one ``CompareSet``: every prompt and conversation of a
prompt file, batched turn by turn in the engine and saved beside the run.
``gemma-workbench eval`` sends ``Eval``: loss and perplexity of a model or a run's checkpoint
on a data file (the computation is ``adapters_lib.perplexity``). Registered in ``COMMANDS``
on import (``adapters_lib.engine.api`` imports this module).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.engine.api.chat import CompareItem
from adapters_lib.engine.api.commands import COMMANDS, LIMITS, TOKEN_LIMIT_ALIASES, Command, Route
from adapters_lib.engine.api.streams import StreamError, TokenChunk
from adapters_lib.evals.eval_result import EvalResult
from adapters_lib.jsontypes import Record, record

__all__ = ["CompareSet", "CompareSetDone", "COMPARE_SET_ITEMS", "Eval", "EvalResult"]


@record
class CompareSetDone(Record):
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """One record per entry, as a saved compare set keeps it (``sample.compare_sets``):
    ``{prompt, base, tuned, settings, step}`` or ``{messages, base: [...], tuned: [...],
    references: [...], settings, step}``."""
    saved: str | None = None
    """The compare set's file beside the run (``<run>/compare/*.jsonl``), if saved."""
    step: int | None = None
    complete: bool = True
    seconds: float = 0.0


COMPARE_SET_ITEMS: dict[str, type[Record] | None] = {
    "token": TokenChunk, "done": CompareSetDone, "error": StreamError}


@record
class CompareSet(Command):
    """A whole compare set (prompts and conversations) in one stream, batched turn by turn and
    saved beside the run (``<run>/compare/<timestamp>.jsonl``) unless ``save`` is false."""

    name = "compare_set"
    route = Route("POST", "/compare-set")
    ALIASES = TOKEN_LIMIT_ALIASES
    slow = True
    needs_jax = touches_devices = streams = True
    items = COMPARE_SET_ITEMS
    run_id: str = ""
    adapter: str = ""
    model: str = ""
    step: int = -1
    entries: tuple[CompareItem, ...] = ()
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    chat: bool = True
    # qlora (#29, additive)
    quantize: str = ""
    """Hold the base as ``[model] quantize`` says ("none", "int8", "int4", "nf4", "gguf");
    "" = the run's own config (else "none")."""
    save: bool = True


@record
class Eval(Command):
    """Loss, perplexity and scored tokens of a model (or a run's checkpoint) on a data file."""

    name = "eval"
    route = Route("POST", "/eval")
    slow = True
    needs_jax = touches_devices = True
    reply = EvalResult
    data: str = ""
    """The file or folder to score (absolute: the engine's working directory is not yours)."""
    model: str = ""
    run_id: str = ""
    """A run id, unique prefix or absolute run folder (its checkpoint is scored)."""
    step: int = -1
    format: str = "auto"
    # qlora (#29, additive)
    quantize: str = ""
    """Hold the base as ``[model] quantize`` says ("none", "int8", "int4", "nf4", "gguf");
    "" = the run's own config (else "none")."""
    loss_on: str = "model"
    max_length: int = 0
    """0 = the run's [data] max_length, else 512."""
    batch_size: int = 4


COMMANDS.update({CompareSet.name: CompareSet, Eval.name: Eval})
LIMITS.update({"messages": 512, "entries": 4096, "system": 64 * 1024})
