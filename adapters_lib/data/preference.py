"""Preference pairs for DPO: records → (prompt, chosen, rejected) → batches of pairs.

Records (any file the readers take; ``[data] field_map`` renames fields as for SFT):

- TRL's layout: ``prompt`` (a string, or a list of chat messages) with ``chosen`` and
  ``rejected`` answers (strings, or message lists ending with the assistant's answer);
- chat-message lists for ``chosen`` and ``rejected`` without a ``prompt``: the messages
  before each list's last (assistant) message are the prompt, and must be the same in both.

An optional ``system`` string comes first. The prompt is written with the model family's
chat template (the one the tokenizer's markers name, ``TokenCodec.markers``) and the answer
as the model turn after it; the loss mask covers the answer tokens (and its end-of-turn
marker) only. A record with a missing answer, identical answers, or a prompt/answer that
does not fit ``max_length`` is dropped with its ``file:line``.

Their batches: ``data.pair_pipeline``. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from adapters_lib.data.formats import ROLES, Example, apply_field_map, chat_messages
from adapters_lib.data.readers import DataIssue, Record, Where
from adapters_lib.data.record_error import RecordError
from adapters_lib.data.tokenize import TokenCodec, TokenizedSet, subset, tokenize_examples

SIDES = ("chosen", "rejected")


@dataclass
class Pair:
    where: Where
    prompt: list[dict[str, str]]
    chosen: str
    rejected: str

    def example(self, side: str) -> Example:
        answer = self.chosen if side == "chosen" else self.rejected
        return Example("chat", self.where, "preference",
                       messages=[*self.prompt, {"role": "assistant", "content": answer}])


def looks_like_pairs(records: list[Record]) -> bool:
    """Most records carry ``chosen`` and ``rejected``."""
    hits = sum(1 for r in records if isinstance(r.data, dict) and "chosen" in r.data and "rejected" in r.data)
    return bool(records) and hits * 2 > len(records)


def _prompt(raw: Any, field_map: dict[str, str]) -> list[dict[str, str]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        if not raw.strip():
            raise RecordError("prompt is empty", "prompt")
        return [{"role": "user", "content": raw}]
    if isinstance(raw, list):
        return _messages(raw, field_map, "prompt")
    raise RecordError(f"prompt is a {type(raw).__name__}; expected a string or a list of messages", "prompt")


def _messages(raw: list, field_map: dict[str, str], name: str) -> list[dict[str, str]]:
    role_key, content_key = field_map.get("role", "role"), field_map.get("content", "content")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get(role_key), str) \
                or m[role_key].lower() not in ROLES:
            raise RecordError(f"{name}[{i}] is not a {{{role_key}, {content_key}}} message", f"{name}[{i}]")
        content = m.get(content_key)
        if not isinstance(content, str):
            raise RecordError(f"{name}[{i}].{content_key} is not a string", f"{name}[{i}].{content_key}")
        out.append({"role": ROLES[m[role_key].lower()], "content": content})
    return out


def _answer(raw: Any, side: str, field_map: dict[str, str]) -> tuple[list[dict[str, str]], str]:
    """(messages before the answer, the answer) of one side."""
    if raw is None:
        raise RecordError(f'missing field "{side}" (a preference record needs chosen and rejected)', side)
    if isinstance(raw, str):
        if not raw.strip():
            raise RecordError(f"{side} is empty", side)
        return [], raw
    if isinstance(raw, list):
        msgs = _messages(raw, field_map, side)
        if not msgs or msgs[-1]["role"] != "assistant":
            raise RecordError(f"{side} does not end with an assistant message", side)
        if not msgs[-1]["content"].strip():
            raise RecordError(f"{side}'s answer is empty", side)
        return msgs[:-1], msgs[-1]["content"]
    raise RecordError(f"{side} is a {type(raw).__name__}; expected a string or a list of messages", side)


def to_pair(record: Record, field_map: dict[str, str] | None = None) -> Pair:
    """One record as a ``Pair``; ``RecordError`` says why it cannot be one."""
    field_map = dict(field_map or {})
    data = apply_field_map(record.data, field_map)
    if not isinstance(data, dict):
        raise RecordError("a text line is not a preference record; expected prompt, chosen, rejected")
    prompt = _prompt(data.get("prompt"), field_map)
    before_c, chosen = _answer(data.get("chosen"), "chosen", field_map)
    before_r, rejected = _answer(data.get("rejected"), "rejected", field_map)
    if before_c != before_r:
        raise RecordError("chosen and rejected differ before their answers (the prompt must be the same)",
                          "rejected")
    messages = prompt + before_c
    system = data.get("system")
    if isinstance(system, str) and system.strip() and not (messages and messages[0]["role"] == "system"):
        messages.insert(0, {"role": "system", "content": system})
    if not any(m["role"] == "user" for m in messages):
        raise RecordError("no prompt: give a prompt field, or user messages before the answers", "prompt")
    try:  # the prompt plus an answer must be a valid conversation (roles alternate)
        chat_messages([*messages, {"role": "assistant", "content": chosen}])
    except RecordError as e:
        raise RecordError(e.message.replace("messages", "prompt"), "prompt") from None
    if chosen.strip() == rejected.strip():
        raise RecordError("chosen and rejected answers are the same; nothing to prefer", "rejected")
    return Pair(record.where, messages, chosen, rejected)


@dataclass
class PairSet:
    """Tokenized pairs: sequence i of ``chosen`` and of ``rejected`` are pair i."""

    pairs: list[Pair]
    chosen: TokenizedSet
    rejected: TokenizedSet
    prompt_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.pairs)

    def take(self, idx: np.ndarray) -> PairSet:
        return PairSet([self.pairs[int(i)] for i in idx], subset(self.chosen, idx), subset(self.rejected, idx),
                       self.prompt_lengths[idx])


def tokenize_pairs(records: list[Record], codec: TokenCodec, *, max_length: int, truncation: str = "right",
                   field_map: dict[str, str] | None = None) -> tuple[PairSet, list[DataIssue]]:
    """Every record as a tokenized pair, or an issue (file:line) saying why it was dropped."""
    pairs: list[Pair] = []
    issues: list[DataIssue] = []
    for r in records:
        try:
            pairs.append(to_pair(r, field_map))
        except RecordError as e:
            issues.append(DataIssue(r.where, e.message, field=e.field))
    sides = {s: tokenize_examples([p.example(s) for p in pairs], codec, max_length=max_length,
                                  loss_on="model", truncation=truncation) for s in SIDES}
    kept = np.intersect1d(sides["chosen"].example, sides["rejected"].example)
    for s in SIDES:
        for d in sides[s].dropped:
            issues.append(DataIssue(d.where, f"{s}: {d.message}", field=s))
    prompt_lengths = np.asarray([int(np.argmax(sides["chosen"].sequence(int(j))[1] > 0))
                                 for j in np.searchsorted(sides["chosen"].example, kept)], np.int64)
    keep_pairs = [pairs[int(i)] for i in kept]
    out = PairSet(keep_pairs, _renumber(subset(sides["chosen"], kept)), _renumber(subset(sides["rejected"], kept)),
                  prompt_lengths)
    return out, sorted(issues, key=lambda i: (i.where.file, i.where.line or 0, i.where.row or 0))


def _renumber(tset: TokenizedSet) -> TokenizedSet:
    tset.example = np.arange(len(tset), dtype=np.int64)
    return tset


def _stats(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {}
    return {"min": int(x.min()), "median": float(np.median(x)), "max": int(x.max()),
            "mean": round(float(x.mean()), 1)}


def pair_summary(pset: PairSet, records: int) -> dict[str, Any]:
    """What ``data check`` shows of preference data: pair counts and lengths (tokens)."""
    return {"pairs": len(pset), "dropped": max(records - len(pset), 0),
            "prompt_tokens": _stats(pset.prompt_lengths),
            "chosen_tokens": _stats(pset.chosen.lengths - pset.prompt_lengths),
            "rejected_tokens": _stats(pset.rejected.lengths - pset.prompt_lengths)}


def render_pairs(summary: dict[str, Any]) -> str:
    def s(k: str) -> str:
        st = summary.get(k) or {}
        return f"min {st['min']} · median {st['median']:.0f} · max {st['max']}" if st else "-"

    return (f"preference pairs: {summary['pairs']} ({summary['dropped']} dropped); answer tokens "
            f"chosen {s('chosen_tokens')}, rejected {s('rejected_tokens')}; prompt {s('prompt_tokens')}")
