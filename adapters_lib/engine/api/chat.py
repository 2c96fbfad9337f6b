"""Chat records of the API: messages in, per-turn answers out.

Leaf types that both ``commands`` (Sample, Compare take ``messages``) and ``replies``
(CompareDone has ``turns``) use; they import nothing of the API.
"""

from __future__ import annotations

from adapters_lib.jsontypes import Record, record

__all__ = ["ChatMessage", "CompareItem", "SideAnswer", "CompareTurn"]


@record
class ChatMessage(Record):
    """One message of a conversation: ``role`` "system" (first only), "user" or "assistant".

    An assistant message carries ``content`` (a reference answer, kept for scoring, never fed
    to a model), or ``base`` and ``tuned`` (each side's earlier answer: the history a chat
    client sends back), or both."""

    role: str = "user"
    content: str | None = None
    base: str | None = None
    tuned: str | None = None


@record
class CompareItem(Record):
    """One entry of a compare set: a ``prompt`` or a conversation (``messages``)."""

    prompt: str = ""
    messages: tuple[ChatMessage, ...] = ()
    system: str = ""


@record
class SideAnswer(Record):
    text: str = ""
    tokens: int = 0
    stop_reason: str | None = None
    seconds: float = 0.0
    first_token_s: float = 0.0
    tokens_per_s: float = 0.0
    """The decode rate after the first token (``first_token_s`` holds prefill and compile)."""


@record
class CompareTurn(Record):
    """One user turn of a compared conversation and each side's answer."""

    user: str = ""
    reference: str | None = None
    """The assistant turn given in the request without sides: a reference, never fed."""
    given: bool = False
    """The request carried both answers (history): nothing was generated for it."""
    base: str = ""
    tuned: str = ""
    sides: dict[str, SideAnswer] | None = None
    """Generated turns: tokens, tokens_per_s, stop_reason per side."""
