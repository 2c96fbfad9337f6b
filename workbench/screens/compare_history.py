"""What the Compare screen reads: the token stream's items, earlier compares of a run and
the per-side figures of a finished one.

Earlier compares are the run's ``compare/*.jsonl`` files (one object per prompt: ``prompt``,
``base``, ``tuned``, ``settings``; written by ``gemma-workbench compare`` and by the engine).
An engine that lists them in the run record (``compares``) is read first; otherwise the
files are read where the run directory is on this machine (a remote engine's are not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters_lib.engine import api

MAX_EARLIER = 200
STOP_WORDS = {"stop": "end of turn", "length": "max new tokens", "cancelled": "cancelled"}
"""The engine's ``stop_reason`` values as the pane's frame says them."""


def earlier_compares(record: api.RunDetail) -> list[dict[str, Any]]:
    """The run's earlier compares, newest first, each with ``when`` (its file's stamp)."""
    listed = record.extra.get("compares")
    if isinstance(listed, list):
        return [c for c in listed if isinstance(c, Mapping)][:MAX_EARLIER]
    folder = Path(record.dir) / "compare"
    if not record.dir or not folder.is_dir():
        return []
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl"), reverse=True):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, Mapping) and ("base" in item or "tuned" in item):
                out.append({**item, "when": path.stem})
        if len(out) >= MAX_EARLIER:
            break
    return out[:MAX_EARLIER]


def side_stats(summary: Mapping[str, Any], side: str) -> str:
    """``"12 tokens · 41.5 tok/s · stop: end of turn"`` for one side of a finished compare
    (a saved one: its ``tokens``, ``tokens_per_s`` and ``stop_reason``, each per side)."""
    parts = []
    tokens = _per_side(summary, "tokens", side)
    if isinstance(tokens, int):
        parts.append(f"{tokens} tokens")
    speed = _per_side(summary, "tokens_per_s", side)
    if isinstance(speed, (int, float)):
        parts.append(f"{speed:.1f} tok/s")
    reason = _per_side(summary, "stop_reason", side)
    if reason:
        parts.append(f"stop: {STOP_WORDS.get(str(reason), str(reason).replace('_', ' '))}")
    return " · ".join(parts)


def _per_side(summary: Mapping[str, Any], key: str, side: str) -> Any:
    value = summary.get(key)
    return value.get(side) if isinstance(value, Mapping) else None


def done_stats(done: api.CompareDone, side: str) -> str:
    """``side_stats`` of a compare the engine just finished."""
    return side_stats({"tokens": done.tokens, "tokens_per_s": done.tokens_per_s,
                       "stop_reason": done.stop_reason}, side)


def token_side(item: api.StreamItem) -> tuple[str, str]:
    """(side, text) of one compare stream item (``api.COMPARE_ITEMS``); side is base, tuned,
    done or error."""
    if item.type == "done":
        return "done", ""
    if item.type == "error":
        return "error", item.data.message
    return item.data.side or "", item.data.text


def blank_words(text: str) -> str:
    """``"64 line breaks"``: what an answer of blank space holds."""
    breaks = text.count("\n")
    spaces = len(text) - breaks
    return " and ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in
                        ((breaks, "line break"), (spaces, "space")) if n)
