"""Multi-turn A/B on the Compare screen: the conversation so far and how its panes read.

In a conversation (``ctrl+n`` on Compare) every prompt is the next user turn: the engine's
``compare`` gets ``messages`` — the earlier turns as history, each side with its own answers
(``{"role": "assistant", "base": ..., "tuned": ...}``) — and answers the new turn only.
A saved conversation (``<run>/compare/*.jsonl``: ``messages`` and one answer per user turn
and side) reads back into the same transcript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape

from workbench.screens.compare_history import blank_words

SIDES = ("base", "tuned")


@dataclass
class Conversation:
    """The turns answered so far: ``{"user", "base", "tuned"}`` each."""

    turns: list[dict[str, str]] = field(default_factory=list)

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """What the engine gets for the next turn: the history, then ``prompt``."""
        out: list[dict[str, str]] = []
        for t in self.turns:
            out.append({"role": "user", "content": t["user"]})
            out.append({"role": "assistant", "base": t["base"], "tuned": t["tuned"]})
        out.append({"role": "user", "content": prompt})
        return out

    def add(self, user: str, answers: Mapping[str, str]) -> None:
        self.turns.append({"user": user, **{s: str(answers.get(s, "")) for s in SIDES}})

    def transcript(self, side: str, current: tuple[str, str] | None = None) -> str:
        """One pane's text (markup): every turn's prompt, then that side's answer; ``current``
        is the turn being answered (its prompt and the text so far)."""
        turns = [(t["user"], t[side]) for t in self.turns]
        if current is not None:
            turns.append(current)
        return transcript_markup(turns)


def transcript_markup(turns: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"[b]› {escape(user)}[/b]\n{answer_markup(answer)}"
                       for user, answer in turns)


def answer_markup(answer: str) -> str:
    """An answer as a pane shows it; one of blank space only says so (it would look empty)."""
    if answer and not answer.strip():
        return f"[dim](only blank space: {blank_words(answer)})[/]"
    return escape(answer)


def record_text(item: Mapping[str, Any], side: str) -> str:
    """A saved compare's pane (markup): the answer, or a conversation's transcript."""
    answers = item.get(side)
    if not isinstance(answers, list):
        return answer_markup(str(answers or ""))
    users = [str(m.get("content", "")) for m in item.get("messages") or []
             if isinstance(m, Mapping) and m.get("role") == "user"]
    return transcript_markup(list(zip(users, (str(a or "") for a in answers), strict=False)))


def record_prompt(item: Mapping[str, Any]) -> str:
    """A saved compare's prompt: the prompt, or a conversation's last user turn."""
    if item.get("prompt"):
        return str(item["prompt"])
    users = [str(m.get("content", "")) for m in item.get("messages") or []
             if isinstance(m, Mapping) and m.get("role") == "user"]
    return f"{users[-1]} (turn {len(users)})" if users else ""
