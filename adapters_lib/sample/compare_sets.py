"""Compare sets: prompt files in, saved A/B results out, and the seam for scoring them.

A prompt file is ``.txt`` (one prompt a line) or ``.jsonl``: lines of ``{"prompt": "..."}``
(one prompt) or ``{"messages": [...]}`` (a conversation: its user turns are replayed one by
one, its assistant turns kept as references; see ``sample.conversation``). A compare set is
saved as ``<run>/compare/<timestamp>.jsonl``, one record per prompt or conversation:
``{prompt, base, tuned, settings, step}`` for a prompt, ``{messages, base: [...],
tuned: [...], references: [...], settings, step}`` for a conversation.

``score`` is the seam for evaluation metrics: it pairs each side's answers with the
references and applies metric functions ``(prediction, reference) -> float`` given by the
caller (the evaluation area's metrics; exact match by default).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.sample.conversation import SIDES, Conversation


def read_prompts(path: str | Path) -> list[Conversation]:
    """The prompts or conversations of a prompt file, each checked (errors name ``file:line``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise WorkbenchError(f"prompt file {str(path)!r} not found", where="--prompts")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"cannot read the prompt file ({e})", where=str(path)) from None
    out: list[Conversation] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if p.suffix != ".jsonl":
            out.append(Conversation.from_prompt(line, where=where))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"invalid JSON ({e.msg})", where=where) from None
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append(Conversation.from_prompt(obj["prompt"], where=where))
        elif isinstance(obj, dict) and "messages" in obj:
            out.append(Conversation.from_messages(obj["messages"], where=f"{where} messages"))
        else:
            raise WorkbenchError('expected an object with "prompt" or "messages"', where=where,
                                 hint='e.g. {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}')
    if not out:
        raise WorkbenchError("the prompt file has no prompts", where=str(path))
    return out


def save_compare(run_path: str | Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """Write one compare set: ``<run>/compare/<timestamp>[-N].jsonl`` (never overwrites)."""
    folder = Path(run_path) / "compare"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{stamp}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{stamp}-{n}.jsonl"
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in records), encoding="utf-8")
    return path


def saved_compares(run_path: str | Path, limit: int = 200) -> list[dict[str, Any]]:
    """A run's saved compares (``<run>/compare/*.jsonl``), newest first, at most ``limit``,
    each record with ``when`` (its file's stamp); unreadable lines and files are skipped."""
    folder = Path(run_path) / "compare"
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl"), reverse=True) if folder.is_dir() else ():
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
        if len(out) >= limit:
            break
    return out[:limit]


def read_compare_set(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    try:
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"cannot read the compare set ({e})", where=str(p)) from None


def scoring_pairs(record: Mapping[str, Any], side: str) -> list[tuple[str, str]]:
    """(answer, reference) of every turn of a record that has a reference."""
    if "messages" not in record:
        ref = record.get("reference")
        return [(str(record.get(side, "")), str(ref))] if isinstance(ref, str) else []
    answers, refs = record.get(side) or [], record.get("references") or []
    return [(str(a), str(r)) for a, r in zip(answers, refs, strict=False) if isinstance(r, str)]


def score(records: Sequence[Mapping[str, Any]],
          metrics: Mapping[str, Callable[[str, str], float]] | None = None,
          sides: Sequence[str] = SIDES) -> dict[str, dict[str, float | int]]:
    """``{side: {metric: mean, "n": pairs}}`` over every referenced turn of a compare set."""
    if metrics is None:
        from adapters_lib.evaluate import exact_match_text

        metrics = {"exact_match": lambda a, r: float(exact_match_text(a, r))}
    out: dict[str, dict[str, float | int]] = {}
    for side in sides:
        pairs = [pair for rec in records for pair in scoring_pairs(rec, side)]
        row: dict[str, float | int] = {"n": len(pairs)}
        for name, fn in metrics.items():
            row[name] = sum(fn(a, r) for a, r in pairs) / len(pairs) if pairs else float("nan")
        out[side] = row
    return out
