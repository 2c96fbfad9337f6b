"""The generation commands (sample, compare, compare_set) over one record of their settings,
and eval.

``Decoding`` is the one list of the generation settings: the fields every generation
command takes (the decoding values, the chat template, how the base is held). The engine
turns them into ``SamplingSettings`` (``Decoding.settings()``); the CLI's decoding flags
(``workbench/commands/_generation_args.py``) and the TUI's Compare are built from its fields
(``flag``/``help`` in each field's metadata; ``DECODING``); the client sends them as they are.

``gemma-workbench compare`` sends one ``CompareSet``: every prompt and conversation of a
prompt file, batched turn by turn in the engine and saved beside the run.
``gemma-workbench eval`` sends ``Eval``: loss and perplexity of a model or a run's checkpoint
on a data file (the computation is ``adapters_lib.evals.perplexity``). Registered in ``COMMANDS``
on import (``adapters_lib.engine.api`` imports this module).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.engine.api.chat import ChatMessage, CompareItem
from adapters_lib.engine.api.commands import COMMANDS, LIMITS, TOKEN_LIMIT_ALIASES, Command, Route
from adapters_lib.engine.api.streams import COMPARE_ITEMS, SAMPLE_ITEMS, StreamError, TokenChunk
from adapters_lib.errors import WorkbenchError
from adapters_lib.evals.eval_result import EvalResult
from adapters_lib.jsontypes import Record, record

__all__ = ["Decoding", "DECODING", "GENERATION_DTYPES", "Sample", "Compare", "CompareSet",
           "CompareSetDone", "COMPARE_SET_ITEMS", "CompareList", "ListCompares", "Eval", "EvalResult",
           "PrepareCompare", "PrepareCompareReply"]

GENERATION_DTYPES = ("", "float32", "bfloat16")
"""``generation_dtype``: "" = the run's ``[model] generation_dtype`` (else the weights as
loaded); "bfloat16" = generation reads a bf16 copy of a float base (made once, kept)."""


def _flag(flag: str, default: Any, help: str, metavar: str = "", **kw: Any) -> Any:
    return dataclasses.field(default=default, metadata={"flag": flag, "help": help, "metavar": metavar, **kw})


@record
class Decoding(Command):
    """The settings every generation command takes (see the module doc)."""

    ALIASES = TOKEN_LIMIT_ALIASES

    max_new_tokens: int = _flag("--max-new-tokens", 64, "stop after N tokens (64)", "N")
    """The limit on new tokens (the TUI's "max new"). A request may say ``max_tokens`` (its
    first name, ``ALIASES``)."""
    temperature: float = _flag("--temperature", 0.0, "0 = greedy (default)", "T")
    top_k: int = _flag("--top-k", 0, "keep the K likeliest tokens (0 = off)", "K")
    top_p: float = _flag("--top-p", 1.0, "nucleus sampling (1.0 = off)", "P")
    seed: int = _flag("--seed", 0, "sampling seed (0)", "S")
    chat: bool = True
    """Wrap the prompt in the Gemma chat template (the CLI's ``--raw`` turns it off)."""
    quantize: str = ""
    """Hold the base as ``[model] quantize`` says ("none", "int8", "int4", "nf4", "gguf");
    "" = the run's own config (else "none")."""
    generation_dtype: str = _flag(
        "--generation-dtype", "", "bfloat16: generate from a bf16 copy of a float base (faster on "
        "CPU; made once, kept); float32: as trained (default: the run's [model] generation_dtype, "
        "else the weights as loaded)", "D", choices=GENERATION_DTYPES[1:])
    """``GENERATION_DTYPES``."""

    def settings(self) -> Any:
        """The decoding values as ``SamplingSettings`` (a bad value names this request's key)."""
        from adapters_lib.sample.settings import SamplingSettings

        try:
            return SamplingSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                    top_k=self.top_k, top_p=self.top_p, seed=self.seed)
        except WorkbenchError as e:  # its where names the CLI flag: name the request's key
            flags = {f.metadata.get("flag"): f.name for f in dataclasses.fields(Decoding)}
            key = flags.get(e.where or "", (e.where or "").lstrip("-").replace("-", "_"))
            raise WorkbenchError(e.message, where=f"{self.name} request: {key}", hint=e.hint) from None

    def decoding(self) -> dict[str, Any]:
        """This request's generation settings (``DECODING``'s keys)."""
        return {k: getattr(self, k) for k in DECODING}

    @staticmethod
    def from_settings(settings: Any, **more: Any) -> dict[str, Any]:
        """``SamplingSettings`` (and ``more`` of the other fields) as a request's fields."""
        return {"max_new_tokens": settings.max_new_tokens, "temperature": settings.temperature,
                "top_k": settings.top_k, "top_p": settings.top_p, "seed": settings.seed, **more}


DECODING: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Decoding) if f.name != "extra")
"""The generation settings' names, in order."""


@record
class Sample(Decoding):
    name = "sample"
    route = Route("POST", "/sample")
    slow = True
    needs_jax = touches_devices = streams = True
    items = SAMPLE_ITEMS
    prompt: str = ""
    run_id: str = ""
    """Tuned model of this run; empty = the base model given by ``model``."""
    model: str = "demo"
    step: int = -1
    """Checkpoint step of the run (-1 = latest)."""
    messages: tuple[ChatMessage, ...] = ()
    """A conversation instead of ``prompt``: the model answers its last user turn."""
    system: str = ""
    """A system message before ``prompt``."""
    adapter: str = ""
    """An exported adapter folder (absolute path) instead of ``run_id`` (``model`` is then its
    base model; "" = the adapter's own)."""


@record
class Compare(Decoding):
    name = "compare"
    route = Route("POST", "/compare")
    slow = True
    needs_jax = touches_devices = streams = True
    items = COMPARE_ITEMS
    prompt: str = ""
    run_id: str = ""
    step: int = -1
    messages: tuple[ChatMessage, ...] = ()
    """A conversation instead of ``prompt`` (multi-turn A/B): every user turn without an
    answer is answered, each side with its own history; an assistant message with ``base``
    and ``tuned`` is history, one with ``content`` only a reference (never fed)."""
    system: str = ""
    adapter: str = ""
    model: str = ""
    """The base model of ``adapter`` (default: the adapter's)."""
    # additive: keep the result beside the run
    save: bool = False
    """Keep the result beside the run (``<run>/compare/<timestamp>.jsonl``, one record as a
    compare set keeps it, plus each side's figures): how the TUI's compares are browsable."""


@record
class CompareSetDone(Record):
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """One record per entry, as a saved compare set keeps it (``sample.compare_sets``):
    ``{prompt, base, tuned, settings, step}`` or ``{messages, base: [...], tuned: [...],
    references: [...], settings, step}``; and (additive) each side's figures
    for its last generated turn, as ``CompareDone`` has them: ``tokens``, ``tokens_per_s``,
    ``first_token_s``, ``stop_reason``, ``dtype``, ``quantize`` (each ``{base: …, tuned: …}``)."""
    saved: str | None = None
    """The compare set's file beside the run (``<run>/compare/*.jsonl``), if saved."""
    step: int | None = None
    complete: bool = True
    seconds: float = 0.0


COMPARE_SET_ITEMS: dict[str, type[Record] | None] = {
    "token": TokenChunk, "done": CompareSetDone, "error": StreamError}


@record
class CompareSet(Decoding):
    """A whole compare set (prompts and conversations) in one stream, batched turn by turn and
    saved beside the run (``<run>/compare/<timestamp>.jsonl``) unless ``save`` is false."""

    name = "compare_set"
    route = Route("POST", "/compare-set")
    slow = True
    needs_jax = touches_devices = streams = True
    items = COMPARE_SET_ITEMS
    run_id: str = ""
    adapter: str = ""
    model: str = ""
    step: int = -1
    entries: tuple[CompareItem, ...] = ()
    save: bool = True


@record
class CompareList(Record):
    compares: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """A run's saved compares, newest first, as saved (``sample.compare_sets.saved_compares``),
    each with ``when`` (its file's stamp)."""


@record
class ListCompares(Command):
    """A run's earlier compares, read where the run is (the engine's machine: right through
    ``--remote`` too)."""

    name = "list_compares"
    route = Route("GET", "/runs/{run_id}/compares", "query")
    reply = CompareList
    run_id: str = ""
    limit: int = 200


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
    # additive: how the base is held
    quantize: str = ""
    """Hold the base as ``[model] quantize`` says ("none", "int8", "int4", "nf4", "gguf");
    "" = the run's own config (else "none")."""
    loss_on: str = "model"
    max_length: int = 0
    """0 = the run's [data] max_length, else 512."""
    batch_size: int = 4


@record
class PrepareCompareReply(Record):
    queued: bool = False
    """Whether the run's Compare programs are being made ready (false: see ``message``)."""
    message: str = ""


@record
class PrepareCompare(Command):
    """Compare picked a run's checkpoint: load it and compile its Compare (and eval) programs
    behind, on the compile thread (``engine.warm_compare``), so the first answer waits for
    none. Answered at once; skipped while a run trains or a request waits."""

    name = "prepare_compare"
    route = Route("POST", "/compare/prepare")
    reply = PrepareCompareReply
    run_id: str = ""
    step: int = -1
    """-1: the latest checkpoint; -2: the best."""


COMMANDS.update({c.name: c for c in (Sample, Compare, CompareSet, ListCompares, Eval, PrepareCompare)})
LIMITS.update({"messages": 512, "entries": 4096, "system": 64 * 1024})
