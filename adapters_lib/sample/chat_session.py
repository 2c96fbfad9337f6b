"""A multi-turn chat with one model (the whole history is re-sent each turn)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from adapters_lib.sample.prompts import check_prompt
from adapters_lib.sample.settings import SamplingSettings

DEFAULT_SETTINGS = SamplingSettings()


class ChatSession:
    """A conversation with the Gemma template on one ``Sampler`` (and optional adapters)."""

    def __init__(self, sampler: Any, adapters: Any = None, settings: SamplingSettings = DEFAULT_SETTINGS,
                 system: str | None = None):
        self.sampler = sampler
        self.adapters = adapters
        self.settings = settings
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []

    def send(self, text: str) -> Iterator[str]:
        check_prompt(text)
        self.messages.append({"role": "user", "content": text})
        reply: list[str] = []
        for piece in self.sampler.stream(list(self.messages), self.adapters, self.settings):
            reply.append(piece)
            yield piece
        self.messages.append({"role": "assistant", "content": "".join(reply)})
