"""The Gemma chat template, exact, as pure functions of the messages.

A conversation is written::

    <bos><start_of_turn>user
    {user}<end_of_turn>
    <start_of_turn>model
    {answer}<end_of_turn>
    ...

BOS is a token id added once at the start by the tokenizer (never the text ``<bos>``). A
system message has no role of its own in Gemma: it is folded into the first user turn as
``{system}\\n\\n{user}``. Roles "assistant" and "model" are both written ``model``.

Loss: with ``loss_on = "model"`` the trained pieces are each model turn's content and its
``<end_of_turn>`` (so the model learns to stop); the turn markers, the user turns and the
``\\n`` after ``<end_of_turn>`` are context only. ``loss_on = "all"`` trains every piece.

Gemma 4 uses the same layout with ``<|turn>``/``<turn|>``: pass ``markers=GEMMA4_MARKERS``
(``TokenCodec.markers`` picks them from the tokenizer's vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence

START = "<start_of_turn>"
END = "<end_of_turn>"
GEMMA3_MARKERS = (START, END)
"""Turn markers of Gemma 2 and 3 (ids 106/107 and 105/106)."""
GEMMA4_MARKERS = ("<|turn>", "<turn|>")
"""Gemma 4 writes the same template with these markers."""
ROLE_NAME = {"user": "user", "assistant": "model", "model": "model", "system": "system"}
SYSTEM_ROLE_MARKERS = (GEMMA4_MARKERS,)
"""Templates with a real system turn (Gemma 4; ``Family.chat.system_role``). The others fold a
system message into the first user turn. Gemma 4's thinking stays off: no ``<|think|>`` is
written, and no thinking channel is ever a trained piece."""


def fold_system(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Fold a leading system message into the first user turn, as Gemma does."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0]["role"] == "system":
        system = msgs.pop(0)["content"]
        if msgs and msgs[0]["role"] == "user":
            msgs[0]["content"] = f"{system}\n\n{msgs[0]['content']}"
        else:
            msgs.insert(0, {"role": "user", "content": system})
    return msgs


def pieces(messages: Sequence[dict[str, str]], loss_on: str = "model", *,
           markers: tuple[str, str] = GEMMA3_MARKERS) -> list[tuple[str, bool, bool]]:
    """The conversation as (text, trained, is_content) pieces, in order (BOS not included).

    ``is_content`` marks the user's text: it is encoded as text (a marker string inside it
    never becomes a control token, ``TokenCodec.encode_batch``), whatever it holds, even
    when it equals a template piece. The other pieces are the template's own.
    """
    start, end = markers
    out: list[tuple[str, bool, bool]] = []
    every = loss_on == "all"
    turns = list(messages) if markers in SYSTEM_ROLE_MARKERS else fold_system(messages)
    for m in turns:
        role = ROLE_NAME[m["role"]]
        out.append((f"{start}{role}\n", every, False))
        if role == "model":
            out.append((m["content"], True, True))
            out.append((end, True, False))
            out.append(("\n", every, False))
        else:
            out.append((m["content"], every, True))
            out.append((f"{end}\n", every, False))
    return out


def segments(messages: Sequence[dict[str, str]], loss_on: str = "model", *,
             markers: tuple[str, str] = GEMMA3_MARKERS) -> list[tuple[str, bool]]:
    """The conversation as (text, trained) pieces, in order (BOS not included)."""
    return [(text, trained) for text, trained, _ in pieces(messages, loss_on, markers=markers)]


def marker_pieces(markers: tuple[str, str] = GEMMA3_MARKERS) -> set[str]:
    """The fixed template pieces (everything ``segments`` yields that is not content)."""
    start, end = markers
    system = {f"{start}system\n"} if markers in SYSTEM_ROLE_MARKERS else set()
    return {f"{start}user\n", f"{start}model\n", end, f"{end}\n", "\n"} | system


def render(messages: Sequence[dict[str, str]], *, markers: tuple[str, str] = GEMMA3_MARKERS) -> str:
    """The whole conversation as text (without BOS)."""
    return "".join(text for text, _ in segments(messages, markers=markers))


def format_prompt(messages: Sequence[dict[str, str]], *,
                  markers: tuple[str, str] = GEMMA3_MARKERS) -> str:
    """The prompt for generating the next model turn: ends with ``<start_of_turn>model\\n``.

    A trailing assistant message is dropped (it is the answer to be generated), so an eval
    example can be passed as it is.
    """
    msgs = list(messages)
    if msgs and msgs[-1]["role"] in ("assistant", "model"):
        msgs = msgs[:-1]
    return render(msgs, markers=markers) + f"{markers[0]}model\n"
