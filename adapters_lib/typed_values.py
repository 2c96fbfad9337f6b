"""One coercer: a TOML or JSON value checked against a dataclass field's type.

Both edges use it: the run config (``adapters_lib.config``: TOML files, ``--set``) and the
engine's commands (JSON bodies). A value of the wrong type, a number that is not finite
(``nan``, ``inf``), an integer outside 64 bits, or a string holding a NUL or another control
character where text of one line is expected is a ``WorkbenchError`` naming the key.

Supported field types: ``bool``, ``int``, ``float``, ``str``, ``tuple[str, ...]``,
``dict[str, str]`` / ``dict[str, Any]`` and ``X | None``. An ``int`` is accepted where a
``float`` is expected; a ``bool`` is never a number.
"""

from __future__ import annotations

import math
import re
import types
from typing import Any, Union, get_args, get_origin

from adapters_lib.errors import WorkbenchError

INT_LIMIT = 2**63
"""Integers must fit in 64 bits (TOML's own limit); JSON bodies are held to the same."""
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters (tab and newline included): never part of a name, a path or an id."""


def describe(typ: Any) -> str:
    """The type in words, for error messages: "an integer", "a list of strings", …"""
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(typ) if a is not type(None)]
        return describe(inner[0]) + " or null"
    if origin is tuple:
        return "a list of strings"
    if origin is dict:
        args = get_args(typ)
        return "a table of strings" if args and args[1] is str else "an object"
    return {bool: "true or false", int: "an integer", float: "a number",
            str: "a string"}.get(typ, getattr(typ, "__name__", str(typ)))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def coerce(value: Any, typ: Any, *, key: str, where: str | None = None) -> Any:
    """``value`` as ``typ``, or a ``WorkbenchError`` saying what ``key`` must be."""
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in get_args(typ) if a is not type(None)]
        return coerce(value, inner[0], key=key, where=where)

    def bad(what: str | None = None) -> WorkbenchError:
        got = what or f"got {_shown(value)}"
        return WorkbenchError(f"{key} must be {describe(typ)}, {got}", where=where)

    if typ is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                raise bad(f"got {value!r} (write it without a decimal point)")
            raise bad()
        if not -INT_LIMIT <= value < INT_LIMIT:
            raise bad(f"got a {len(str(abs(value)))}-digit number (more than 64 bits)")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
            raise bad(f"got a {len(str(abs(value)))}-digit number")
        if not math.isfinite(value):
            raise WorkbenchError(f"{key} is {value!r}; it must be a finite number", where=where)
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise bad()
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad()
        return tuple(value)
    if origin is dict:
        args = get_args(typ)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad()
        if args and args[1] is str and not all(isinstance(v, str) for v in value.values()):
            raise bad()
        return dict(value)
    raise AssertionError(f"unhandled field type {typ}")


def check_line_text(value: str, *, key: str, where: str | None = None) -> str:
    """A one-line text value (a name, a path, an id): no control characters, no NUL."""
    m = CONTROL.search(value)
    if m:
        raise WorkbenchError(f"{key} holds a control character ({m.group()!r} at position "
                             f"{m.start() + 1})", where=where, hint="remove it")
    return value
