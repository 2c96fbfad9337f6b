"""The items of the engine's streams (server-sent events): run streams and generations.

``stream_item(type, data, items)`` reads one received event as a typed ``StreamItem``; each
streaming command names its item types (``Command.items``: ``RUN_STREAM_ITEMS``,
``SAMPLE_ITEMS``, ``COMPARE_ITEMS``, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.engine.api.chat import CompareTurn
from adapters_lib.engine.api.replies import RunSummary
from adapters_lib.jsontypes import Record, record
from adapters_lib.runs.state import RunState

__all__ = [
    "LogLine",
    "Replayed",
    "RunEnd",
    "StreamError",
    "TokenChunk",
    "SampleDone",
    "CompareDone",
    "StreamItem",
    "RUN_STREAM_ITEMS",
    "SAMPLE_ITEMS",
    "COMPARE_ITEMS",
    "stream_item",
]


@record
class LogLine(Record):
    time: float = 0.0
    level: str = "INFO"
    logger: str = ""
    message: str = ""


@record
class Replayed(Record):
    step: int = 0


@record
class RunEnd(Record):
    state: RunState | None = None


@record
class StreamError(Record):
    message: str = ""
    where: str | None = None
    hint: str | None = None
    step: int | None = None


@record
class TokenChunk(Record):
    text: str = ""
    token: int | None = None
    done: bool = False
    side: str | None = None
    """compare only: "base" or "tuned"."""
    # additive: why a stream ended, and what a chunk answers
    stop_reason: str | None = None
    """On the last chunk of a stream (``done``): "stop", "length" or "cancelled"."""
    turn: int | None = None
    """A conversation's user turn this chunk answers (0-based)."""
    row: int | None = None
    """compare_set only: the item (prompt or conversation) this chunk answers."""


@record
class SampleDone(Record):
    text: str = ""
    tokens: int = 0
    seconds: float = 0.0
    step: int | None = None
    complete: bool = True
    # additive: the answer's speed and why it ended
    tokens_per_s: float = 0.0
    """The decode rate after the first token (0.0: an answer of one token, no decode)."""
    first_token_s: float = 0.0
    """Until the first token: prefill (and a first request's compile)."""
    stop_reason: str | None = None
    """"stop" (the model ended its turn), "length" (max_new_tokens) or "cancelled"."""
    # additive: what the model ran on
    dtype: str = ""
    """The weights' dtype ("float32", "bfloat16": a generation copy)."""
    quantize: str = ""
    """How the base was held ("none", "int8", …)."""


@record
class CompareDone(Record):
    base: str = ""
    tuned: str = ""
    tokens: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    step: int | None = None
    complete: bool = True
    # additive: per side, and every turn of a conversation
    tokens_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    first_token_s: dict[str, float] = dataclasses.field(default_factory=dict)
    stop_reason: dict[str, str] = dataclasses.field(default_factory=dict)
    turns: list[CompareTurn] | None = None
    """For a ``messages`` request: every user turn, answered now or given as history."""
    saved: str | None = None
    """The file the compare was kept in (``<run>/compare/*.jsonl``), when asked to save."""
    # additive: what each side ran on (the Compare header shows it)
    dtype: dict[str, str] = dataclasses.field(default_factory=dict)
    quantize: dict[str, str] = dataclasses.field(default_factory=dict)


@record
class StreamItem(Record):
    """One server-sent event: ``type`` and its typed ``data``."""

    type: str
    data: Any = None


RUN_STREAM_ITEMS: dict[str, type[Record] | None] = {
    "metrics": None, "event": None, "log": LogLine, "status": RunSummary,
    "replayed": Replayed, "end": RunEnd, "error": StreamError}
"""Run stream: item type → data type (None: an open record, kept a dict)."""
SAMPLE_ITEMS: dict[str, type[Record] | None] = {
    "token": TokenChunk, "done": SampleDone, "error": StreamError}
COMPARE_ITEMS: dict[str, type[Record] | None] = {
    "token": TokenChunk, "done": CompareDone, "error": StreamError}


def stream_item(kind: str, data: Any, items: dict[str, type[Record] | None]) -> StreamItem:
    """A received event as a typed item (an unknown type keeps its data as is)."""
    cls = items.get(kind)
    return StreamItem(type=kind, data=cls.from_json(data, key=kind) if cls else data)
