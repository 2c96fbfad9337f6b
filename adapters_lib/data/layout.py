"""The two layouts a data file can have besides the SFT formats (``data.formats``).

- ``preference``: records with ``chosen`` and ``rejected`` (DPO pairs, ``data.preference``);
- ``prompts``: prompt-only records, a ``prompt`` with no answer field an SFT format reads
  (any other columns may come with it, e.g. a reference ``answer``), or ``messages`` whose
  last turn is the user's. They are prompts to answer (``compare --prompts FILE``), with
  nothing to train on by SFT.

A file has a layout when most of its records do (the rule ``looks_like_pairs`` follows). A
cached dataset is judged by its column names alone (``columns_layout``). ``question`` +
``answer`` (GSM8K) stays the SFT format ``qa``: only what no SFT format reads is labelled.
``data list`` and ``data check`` both ask here, so the two name a file alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapters_lib.data.formats import detect

PREFERENCE, PROMPTS = "preference", "prompts"
LAYOUTS = (PREFERENCE, PROMPTS)


def is_pair(data: Any) -> bool:
    return isinstance(data, dict) and "chosen" in data and "rejected" in data


def is_prompt_only(data: Any) -> bool:
    """A ``prompt`` that no SFT format pairs with an answer, or a conversation that ends with
    the user's turn."""
    if not isinstance(data, dict) or "chosen" in data or "rejected" in data:
        return False
    if "prompt" in data:
        return detect(data) is None
    messages = data.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return str(messages[-1].get("role", "")).lower() in ("user", "human")
    return False


def layout_of(records: Iterable[Any]) -> str | None:
    """``preference``, ``prompts`` (most records are of it), else None (an SFT format, or
    unknown). ``records``: raw dicts or ``readers.Record`` objects."""
    rows = [getattr(r, "data", r) for r in records]
    if not rows:
        return None
    for name, test in ((PREFERENCE, is_pair), (PROMPTS, is_prompt_only)):
        if sum(1 for d in rows if test(d)) * 2 > len(rows):
            return name
    return None


def columns_layout(columns: Iterable[str]) -> str | None:
    """The layout of a dataset known by its column names only (a cache's metadata)."""
    cols = dict.fromkeys(map(str, columns), "")
    if is_pair(cols):
        return PREFERENCE
    if "prompt" in cols and is_prompt_only(cols):
        return PROMPTS
    return None
