"""The one prompt tokenizer: a conversation → the ids the model sees before its next turn.

Sampling, A/B, exact-match evaluation and the Keras route all tokenize prompts here, with
the data area's chat template (``adapters_lib.data.chat_template``) and codec
(``adapters_lib.data.tokenize.TokenCodec``), piece by piece exactly as the trainer does:
template pieces are encoded on their own, contents on their own, and the turn markers
follow the tokenizer (Gemma 2/3 or Gemma 4). Marker strings inside user text stay text
(``TokenCodec.encode_batch``). A test checks that the prompt of a conversation is a prefix
of the ids the trainer sees for it, marker strings in the content included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters_lib.errors import WorkbenchError

Prompt = str | Sequence[Mapping[str, str]]
"""A user message (str) or a whole conversation (list of {"role", "content"})."""

ROLES = ("system", "user", "assistant", "model")


def check_prompt(prompt: str, where: str = "--prompt") -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise WorkbenchError("the prompt is empty", where=where, hint="give some text to complete")
    return prompt


def as_messages(prompt: Prompt, where: str = "--prompt") -> list[dict[str, str]]:
    """A prompt as chat messages, checked: roles known, contents text, something to answer."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": check_prompt(prompt, where)}]
    messages = []
    for i, m in enumerate(prompt):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise WorkbenchError(f"message {i} is not a chat message", where=where,
                                 hint='each message is {"role": "system"|"user"|"assistant", "content": "..."}')
        messages.append({"role": str(m["role"]), "content": str(m["content"])})
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise WorkbenchError("the conversation has no user message", where=where,
                             hint="give at least one non-empty user turn")
    return messages


def format_chat(messages: Sequence[Mapping[str, str]], markers: tuple[str, str] | None = None) -> str:
    """The Gemma chat template as text, ending with the open model turn (no BOS)."""
    from adapters_lib.data import chat_template

    return chat_template.format_prompt([dict(m) for m in messages],
                                       markers=markers or chat_template.GEMMA3_MARKERS)


def codec_of(tokenizer: Any) -> Any:
    """The data area's ``TokenCodec`` for a gm tokenizer, a SentencePiece processor or a path."""
    from adapters_lib.data.tokenize import TokenCodec

    return TokenCodec.from_any(tokenizer)


def prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """BOS + the prompt for the next model turn, tokenized exactly as training does.

    ``tokenizer``: a ``TokenCodec`` or anything ``TokenCodec.from_any`` takes. A trailing
    assistant message is dropped (it is the answer to generate, e.g. an eval reference).
    """
    from adapters_lib.data import chat_template

    codec = codec_of(tokenizer)
    msgs = [dict(m) for m in messages]
    if msgs and msgs[-1]["role"] in ("assistant", "model"):
        msgs = msgs[:-1]
    pieces = [(text, content) for text, _, content in chat_template.pieces(msgs, markers=codec.markers)]
    pieces.append((f"{codec.markers[0]}model\n", False))
    # contents through encode_batch: a marker string in user text stays text, as in training
    encoded = iter(codec.encode_batch([text for text, content in pieces if content]))
    ids = [codec.bos]
    for text, content in pieces:
        ids.extend(next(encoded) if content else codec.encode_fixed(text))
    return [int(i) for i in ids]


chat_ids = prompt_ids
"""The name the sampler used before it shared the one prompt tokenizer."""


def raw_ids(tokenizer: Any, text: str) -> list[int]:
    """BOS + raw text (no chat template); a leading literal ``<bos>`` is the BOS itself.

    Raw text is the user's own template: marker strings in it *are* the control tokens
    (``--raw`` is how a pre-formatted prompt is sent), unlike chat contents.
    """
    codec = codec_of(tokenizer)
    check_prompt(text)
    text = text[len("<bos>"):] if text.startswith("<bos>") else text
    return [codec.bos] + [int(i) for i in codec.sp.encode(text, out_type=int)]
