"""Formats: raw records → ``Example`` (a chat conversation or a plain text), with line-precise errors.

Formats (``[data] format``; "auto" detects them per file, the majority wins):

=================  ==========================================================  =========
format             fields                                                      becomes
=================  ==========================================================  =========
text               ``text`` (or a paragraph of a .txt file)                    text
prompt_response    ``prompt`` + ``response`` | ``completion``; ``input`` + ``output``  chat
alpaca             ``instruction`` + ``output`` (+ optional ``input``)          chat
chat               ``messages``: [{role, content}], roles user/assistant/system
                   ("model", ShareGPT "human"/"gpt" are accepted)               chat
qa                 ``question`` + ``answer`` (GSM8K)                            chat
=================  ==========================================================  =========

Every non-chat record may carry an optional ``system`` string. ``[data] field_map`` renames
source fields to the format's names: ``{prompt = "question"}`` reads ``prompt`` from the
source field ``question``; ``messages``, ``role`` and ``content`` can be renamed too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from adapters_lib.data.readers import DataIssue, Record, Where
from adapters_lib.data.record_error import RecordError
from adapters_lib.errors import WorkbenchError

FORMATS = ("text", "prompt_response", "alpaca", "chat", "qa")
ROLES = {"user": "user", "assistant": "assistant", "model": "assistant", "system": "system",
         "human": "user", "gpt": "assistant"}
"""Accepted roles; "model" (Gemma) and ShareGPT's "human"/"gpt" are aliases."""

FIELDS = {
    "text": "text",
    "prompt_response": "prompt + response (or completion), or input + output",
    "alpaca": "instruction + output (+ input)",
    "chat": "messages",
    "qa": "question + answer",
}


@dataclass
class Example:
    """A normalised example. ``messages`` roles are user/assistant/system (system first, if any)."""

    kind: str
    """"chat" or "text"."""
    where: Where
    format: str
    messages: list[dict[str, str]] = field(default_factory=list)
    text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_chat(self) -> dict[str, Any]:
        """The chat-format record (``{"messages": [...]}``), as used for exact-match eval."""
        return {"messages": [dict(m) for m in self.messages], "source": str(self.where), **self.meta}


def detect(data: dict[str, Any] | str) -> str | None:
    """The format a single (field-mapped) record looks like, or None."""
    if isinstance(data, str):
        return "text"
    keys = data.keys()
    if "messages" in keys:
        return "chat"
    if "instruction" in keys and "output" in keys:
        return "alpaca"
    if "question" in keys and "answer" in keys:
        return "qa"
    if "prompt" in keys and ("response" in keys or "completion" in keys):
        return "prompt_response"
    if "input" in keys and "output" in keys:
        return "prompt_response"
    if "text" in keys:
        return "text"
    return None


def apply_field_map(data: dict[str, Any] | str, field_map: dict[str, str]) -> dict[str, Any] | str:
    if not field_map or isinstance(data, str):
        return data
    out = dict(data)
    for fmt_name, src in field_map.items():
        if fmt_name in ("role", "content"):
            continue
        if src in data:
            out[fmt_name] = data[src]
    return out


def to_examples(
    records: list[Record], fmt: str = "auto", field_map: dict[str, str] | None = None, *,
    labels: dict[str, str] | None = None, label_names: list[str] | None = None,
) -> tuple[list[Example], list[DataIssue], dict[str, str]]:
    """Convert records; returns (examples, issues, format per file). ``labels``: the
    ``[data] labels`` map (``adapters_lib.data.labels``), applied after ``field_map``."""
    field_map = dict(field_map or {})
    if fmt != "auto" and fmt not in FORMATS:
        raise WorkbenchError(f"unknown data format {fmt!r}", where="[data] format",
                             hint=f"use auto or one of {', '.join(FORMATS)}")
    mapped = [apply_field_map(r.data, field_map) for r in records]
    issues: list[DataIssue] = []
    if labels:
        from adapters_lib.data.labels import apply_labels

        labelled: list[Record] = []
        kept: list[dict[str, Any] | str] = []
        for r, data in zip(records, mapped, strict=True):
            try:
                kept.append(apply_labels(data, labels, label_names))
                labelled.append(r)
            except RecordError as e:
                issues.append(DataIssue(r.where, e.message, field=e.field))
        records, mapped = labelled, kept
    by_file: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_file.setdefault(r.where.file, []).append(i)
    examples: list[Example] = []
    file_formats: dict[str, str] = {}
    for file, idx in by_file.items():
        detected = [detect(mapped[i]) for i in idx]
        if fmt == "auto":
            counts = Counter(d for d in detected if d)
            if not counts:
                keys = _keys_of(mapped[idx[0]])
                issues.append(DataIssue(Where(file), f"no known format: records have fields {keys}; expected "
                                        + "; ".join(f"{k} ({v})" for k, v in FIELDS.items())
                                        + ' — or set [data] format and [data] field_map', field="",))
                continue
            file_fmt = counts.most_common(1)[0][0]
            share = f"{counts[file_fmt]} of {len(idx)} records"
        else:
            file_fmt, share = fmt, "set by [data] format"
        file_formats[file] = file_fmt
        for i, d in zip(idx, detected, strict=True):
            rec, data = records[i], mapped[i]
            if fmt == "auto" and d != file_fmt:
                if d is None:
                    msg = (f"no known format: fields {_keys_of(data)}; this file is {file_fmt} "
                           f"({FIELDS[file_fmt]})")
                else:
                    msg = (f"record looks like {d} ({FIELDS[d]}) but this file is {file_fmt} "
                           f"(detected from {share}); mixed formats: make the records alike or "
                           "set [data] format")
                issues.append(DataIssue(rec.where, msg))
                continue
            try:
                examples.append(convert(data, file_fmt, rec.where, field_map))
            except RecordError as e:
                msg = e.message
                if fmt != "auto" and d not in (None, file_fmt):
                    msg += f" (format is {file_fmt}, but the record looks like {d}: {FIELDS[d]})"
                issues.append(DataIssue(rec.where, msg, field=e.field))
    return examples, issues, file_formats


def _keys_of(data: dict[str, Any] | str) -> str:
    if isinstance(data, str):
        return "(plain text)"
    return ", ".join(sorted(map(str, data))) or "(none)"


def _text_field(data: dict[str, Any], name: str, *, required: bool = True) -> str:
    if name not in data or data[name] is None:
        if required:
            raise RecordError(f'missing field "{name}"', name)
        return ""
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RecordError(f'{name} is a {type(value).__name__}; expected a string', name)
    text = str(value)
    if required and not text.strip():
        raise RecordError(f'{name} is empty', name)
    return text


def convert(data: dict[str, Any] | str, fmt: str, where: Where, field_map: dict[str, str]) -> Example:
    """One record in format ``fmt`` → Example; raises RecordError naming the field."""
    if fmt == "text":
        text = data if isinstance(data, str) else _text_field(data, "text")
        if not text.strip():
            raise RecordError("text is empty", "text")
        return Example("text", where, fmt, text=text)
    if isinstance(data, str):
        raise RecordError(f"plain text cannot be read as {fmt}; use format text")
    if fmt == "chat":
        messages = chat_messages(data.get("messages"), field_map)
        meta = {k: v for k, v in data.items() if k == "task" and isinstance(v, str)}
        return Example("chat", where, fmt, messages=messages, meta=meta)
    if fmt == "qa":
        user, answer = _text_field(data, "question"), _text_field(data, "answer")
    elif fmt == "alpaca":
        user = _text_field(data, "instruction")
        extra = _text_field(data, "input", required=False).strip()
        user = f"{user}\n\n{extra}" if extra else user
        answer = _text_field(data, "output")
    elif fmt == "prompt_response":
        if "prompt" in data:
            user = _text_field(data, "prompt")
            answer = _text_field(data, "response" if "response" in data else "completion")
        else:
            user, answer = _text_field(data, "input"), _text_field(data, "output")
    else:
        raise RecordError(f"unknown format {fmt}")
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    system = _text_field(data, "system", required=False)
    if system.strip():
        messages.insert(0, {"role": "system", "content": system})
    return Example("chat", where, fmt, messages=messages)


def chat_messages(raw: Any, field_map: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Validate a ``messages`` list; normalise roles ("model" → "assistant")."""
    field_map = field_map or {}
    role_key, content_key = field_map.get("role", "role"), field_map.get("content", "content")
    if raw is None:
        raise RecordError('missing field "messages"', "messages")
    if not isinstance(raw, list):
        raise RecordError(f"messages is a {type(raw).__name__}; expected a list of "
                          f"{{{role_key}, {content_key}}} objects", "messages")
    if not raw:
        raise RecordError("messages is empty", "messages")
    out: list[dict[str, str]] = []
    for i, m in enumerate(raw):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RecordError(f"{at} is a {type(m).__name__}; expected an object with "
                              f"{role_key} and {content_key}", at)
        if role_key not in m:
            raise RecordError(f'{at} has no "{role_key}"', f"{at}.{role_key}")
        role = m[role_key]
        if not isinstance(role, str) or role.lower() not in ROLES:
            shown = f'"{role}"' if isinstance(role, str) else repr(role)
            raise RecordError(f"{at}.{role_key} is {shown}; expected user, assistant or system",
                              f"{at}.{role_key}")
        role = ROLES[role.lower()]
        content = _content(m.get(content_key), f"{at}.{content_key}")
        if role == "system" and i != 0:
            raise RecordError(f"{at}.{role_key} is system; a system message may only come first",
                              f"{at}.{role_key}")
        out.append({"role": role, "content": content})
    turns = out[1:] if out[0]["role"] == "system" else out
    if not turns:
        raise RecordError("messages has only a system message; expected user and assistant turns",
                          "messages")
    for j, m in enumerate(turns):
        expected = "user" if j % 2 == 0 else "assistant"
        if m["role"] != expected:
            i = j + (len(out) - len(turns))
            raise RecordError(f"messages[{i}].{role_key} is {m['role']}; expected {expected} "
                              "(turns must alternate user, assistant, user, ...)", f"messages[{i}].{role_key}")
    if not any(m["role"] == "assistant" for m in turns):
        raise RecordError("messages has no assistant turn; nothing to learn", "messages")
    return out


def _content(value: Any, at: str) -> str:
    if isinstance(value, list):  # OpenAI-style parts: [{"type": "text", "text": ...}]
        parts = [p.get("text") for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if len(parts) != len(value):
            raise RecordError(f"{at} has non-text parts; only text is supported", at)
        value = "".join(parts)
    if value is None:
        raise RecordError(f"{at} is missing", at)
    if not isinstance(value, str):
        raise RecordError(f"{at} is a {type(value).__name__}; expected a string", at)
    if not value.strip():
        raise RecordError(f"{at} is empty", at)
    return value


def demo_examples() -> tuple[list[Example], list[Example]]:
    """The built-in demo tasks (``[data] path = "demo"``) as (train, eval) examples."""
    from adapters_lib.models.demo_tasks import demo_splits

    train, evals = demo_splits()

    def conv(items: list[dict[str, Any]], name: str) -> list[Example]:
        return [convert(ex, "chat", Where(name, i + 1), {}) for i, ex in enumerate(items)]

    return conv(train, "demo:train"), conv(evals, "demo:eval")
