"""Data test fixtures: the demo tokenizer as a TokenCodec, and writers of data files at test time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def codec():
    """The demo tokenizer (SentencePiece, Gemma 3 ids) wrapped for the data pipeline."""
    from adapters_lib.data import TokenCodec

    return TokenCodec.from_any(None)


def jsonl(records: list[Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    """``write("train.jsonl", text_or_bytes)`` → the path, under a per-test folder."""

    def _write(name: str, content: str | bytes) -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
        return p

    return _write


QA = [{"question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(12)]
CHAT = [{"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": f"Say {w}."},
                      {"role": "assistant", "content": w}]} for w in ("apple", "river", "stone", "cloud")]
