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

MAX_EARLIER = 200
STOP_WORDS = {"stop": "end of turn", "length": "max tokens", "cancelled": "cancelled"}
"""The engine's ``stop_reason`` values as the pane's frame says them."""


def earlier_compares(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's earlier compares, newest first, each with ``when`` (its file's stamp)."""
    listed = record.get("compares")
    if isinstance(listed, list):
        return [c for c in listed if isinstance(c, Mapping)][:MAX_EARLIER]
    folder = Path(str(record.get("dir") or "")) / "compare"
    if not record.get("dir") or not folder.is_dir():
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


def side_stats(summary: dict[str, Any], side: str) -> str:
    """``"12 tokens · 41.5 tok/s · stop: end of turn"`` for one side of a finished compare."""
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


def _per_side(summary: dict[str, Any], key: str, side: str) -> Any:
    value = summary.get(key)
    return value.get(side) if isinstance(value, Mapping) else None


def token_side(ev: dict[str, Any]) -> tuple[str, str]:
    """(side, text) of one compare stream item; side is base, tuned, done or error."""
    kind = str(ev.get("type", ev.get("event", "")))
    if isinstance(ev.get("data"), dict):
        ev = {**ev["data"], "type": kind}
    if kind in ("done", "end"):
        return "done", ""
    if kind == "error" or "error" in ev and "side" not in ev:
        err = ev.get("error") or ev.get("message")
        return "error", err.get("message", str(err)) if isinstance(err, dict) else str(err)
    side = str(ev.get("side", ev.get("model", "")))
    text = ev.get("text", ev.get("token", ev.get("delta", "")))
    return side, str(text or "")


def blank_words(text: str) -> str:
    """``"64 line breaks"``: what an answer of blank space holds."""
    breaks = text.count("\n")
    spaces = len(text) - breaks
    return " and ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in
                        ((breaks, "line break"), (spaces, "space")) if n)
