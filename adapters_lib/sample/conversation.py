"""Multi-turn A/B: a conversation replayed turn by turn, each side keeping its own history.

A conversation is a list of chat messages: an optional leading ``system`` message, then user
turns, each optionally followed by an assistant turn. An assistant turn is either a
*reference* (``{"role": "assistant", "content": "..."}``: kept for scoring, never fed to a
model) or a turn already answered by each side (``{"role": "assistant", "base": "...",
"tuned": "..."}``, optionally with a reference ``content`` too), as a client sends the
history of a chat back.

``replay`` answers every user turn that is not answered yet, one turn at a time: side S's
prompt for turn t is the system message, the user turns before t with S's own answers, and
user turn t. All conversations' turn t are one batched computation (for a LoRA model both
sides too, each with its own prompts); every turn uses the same settings and seed. A
single user message is the one-turn case (and may be raw text, ``chat=False``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.sample.prompts import Prompt, check_prompt
from adapters_lib.sample.settings import Piece, SamplingSettings

SIDES = ("base", "tuned")


@dataclass
class Turn:
    user: str
    reference: str | None = None
    answers: dict[str, Any] = field(default_factory=dict)
    """Side → its answer: a ``tuned.base.Answer`` (generated here) or a str (given history)."""
    given: bool = False

    def text(self, side: str) -> str:
        a = self.answers.get(side)
        return a if isinstance(a, str) else (a.text if a is not None else "")


@dataclass
class Conversation:
    turns: list[Turn]
    system: str | None = None
    messages: list[dict[str, Any]] | None = None
    """The messages as given (kept in the record); None for a plain prompt."""
    prompt: str | None = None
    """A plain prompt (one user turn, no system): raw text is allowed for it."""

    @classmethod
    def from_prompt(cls, prompt: Prompt, *, where: str = "--prompt") -> Conversation:
        if isinstance(prompt, str):
            check_prompt(prompt, where)
            return cls([Turn(prompt)], prompt=prompt)
        return cls.from_messages(prompt, where=where)

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]], *, where: str = "messages",
                      sides: Sequence[str] = SIDES) -> Conversation:
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise WorkbenchError("messages must be a non-empty list of chat messages", where=where,
                                 hint='e.g. [{"role": "user", "content": "..."}]')
        system, turns = None, []
        for i, m in enumerate(messages):
            at = f"{where}[{i}]"
            role = m.get("role") if isinstance(m, Mapping) else None
            content = m.get("content") if isinstance(m, Mapping) else None
            if role == "system" and i == 0:
                if not isinstance(content, str):
                    raise WorkbenchError("a system message needs text content", where=at)
                system = content
            elif role == "user":
                if not isinstance(content, str) or not content.strip():
                    raise WorkbenchError("a user message needs non-empty text content", where=at)
                turns.append(Turn(content))
            elif role in ("assistant", "model"):
                if not turns or turns[-1].reference is not None or turns[-1].given:
                    raise WorkbenchError("an assistant message must follow a user message", where=at,
                                         hint="alternate user and assistant turns")
                turn = turns[-1]
                if content is not None and not isinstance(content, str):
                    raise WorkbenchError("an assistant message's content must be text", where=at)
                turn.reference = content
                given = {s: m[s] for s in SIDES if s in m}
                if given:
                    if set(given) != set(sides) or not all(isinstance(v, str) for v in given.values()):
                        raise WorkbenchError(f"an answered turn needs the text of each side ({', '.join(sides)})",
                                             where=at, hint='e.g. {"role": "assistant", "base": "...", "tuned": "..."}')
                    if any(not t.given for t in turns[:-1]):
                        raise WorkbenchError("answered turns must come before the turns to answer", where=at)
                    turn.answers, turn.given = dict(given), True
            elif role == "system":
                raise WorkbenchError("only the first message may be the system message", where=at)
            else:
                raise WorkbenchError(f"unknown role {role!r}", where=at,
                                     hint='roles: "system" (first only), "user", "assistant"')
        if not turns:
            raise WorkbenchError("the conversation has no user message", where=where)
        if all(t.given for t in turns):
            raise WorkbenchError("every user turn is answered already: nothing to generate", where=where,
                                 hint="end the conversation with a new user message")
        return cls(turns, system=system, messages=[dict(m) for m in messages])

    def prompt_for(self, side: str, t: int) -> Prompt:
        """Side ``side``'s prompt for turn ``t``: the system message, its own history, the turn."""
        if self.prompt is not None and self.system is None:
            return self.prompt  # plain text: raw mode works for it too
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for turn in self.turns[:t]:
            msgs += [{"role": "user", "content": turn.user},
                     {"role": "assistant", "content": turn.text(side)}]
        return msgs + [{"role": "user", "content": self.turns[t].user}]

    def record(self, sides: Sequence[str] = SIDES) -> dict[str, Any]:
        """The result as a compare set keeps it: one assistant turn per user turn and side."""
        out: dict[str, Any] = {}
        given_system = bool(self.messages) and self.messages[0].get("role") == "system"
        if self.system is not None and not given_system:
            out["system"] = self.system
        if self.prompt is not None:
            out["prompt"] = self.prompt
            for side in sides:
                out[side] = self.turns[0].text(side)
            return out
        out["messages"] = self.messages
        for side in sides:
            out[side] = [t.text(side) for t in self.turns]
        out["references"] = [t.reference for t in self.turns]
        return out

    def answers(self, side: str) -> list[Any]:
        return [t.answers.get(side) for t in self.turns]


TurnHook = Callable[[int, int, Piece], bool | None]
"""``hook(conversation, turn, piece)``; returning False stops the replay."""


def replay(model: Any, conversations: Sequence[Conversation | Prompt], settings: SamplingSettings, *,
           sides: Sequence[str] = SIDES, chat: bool = True, on_piece: TurnHook | None = None,
           ) -> list[Conversation]:
    """Answer every unanswered user turn of ``conversations`` on each side of ``model`` (a
    ``TunedModel``), turn by turn; returns the conversations with their answers filled in."""
    convs = [c if isinstance(c, Conversation) else Conversation.from_prompt(c) for c in conversations]
    depth = max(len(c.turns) for c in convs)
    for t in range(depth):
        rows = [i for i, c in enumerate(convs) if len(c.turns) > t and not c.turns[t].given]
        if not rows:
            continue
        prompts = {side: [convs[i].prompt_for(side, t) for i in rows] for side in sides}
        stopped = False

        def hook(piece: Piece, t: int = t, rows: list[int] = rows) -> bool | None:
            nonlocal stopped
            if on_piece is not None and on_piece(rows[piece.row], t, piece) is False:
                stopped = True
                return False
            return None

        got = model.generate(prompts, settings, chat=chat, on_piece=hook)
        for side, answers in got.items():
            for row, answer in zip(rows, answers, strict=True):
                convs[row].turns[t].answers[side] = answer
        if stopped:
            break
    return convs
