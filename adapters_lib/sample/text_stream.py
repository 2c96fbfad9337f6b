"""Token ids → text pieces as they come, never splitting a character."""

from __future__ import annotations

from typing import Any


class TextStream:
    """Turns token ids into text pieces as they come, never splitting a character.

    SentencePiece's byte fallback spells a multi-byte character as several byte tokens: a
    piece is held back until its bytes are complete.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for its other bytes
            return ""
        if not text.startswith(self.emitted):  # decoding changed earlier text: re-sync
            self.emitted = text
            return ""
        piece = text[len(self.emitted):]
        self.emitted = text
        return piece

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids) if self.ids else ""
        piece = text[len(self.emitted):] if text.startswith(self.emitted) else ""
        self.emitted = text
        return piece
