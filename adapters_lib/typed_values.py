"""One coercer: a TOML or JSON value checked against a dataclass field's type.

The coercer itself is ``adapters_lib.jsontypes.coerce`` (re-exported here, where the run
config has always found it); this module adds the one-line-text check of names and paths.

Both edges use it: the run config (``adapters_lib.config``: TOML files, ``--set``) and the
engine's commands (JSON bodies). A value of the wrong type, a number that is not finite
(``nan``, ``inf``), an integer outside 64 bits, or a string holding a NUL or another control
character where text of one line is expected is a ``WorkbenchError`` naming the key.

Supported field types: ``bool``, ``int``, ``float``, ``str``, ``tuple[str, ...]``,
``dict[str, str]`` / ``dict[str, Any]`` and ``X | None``. An ``int`` is accepted where a
``float`` is expected; a ``bool`` is never a number.
"""

from __future__ import annotations

import re

from adapters_lib.errors import WorkbenchError
from adapters_lib.jsontypes import coerce, describe

__all__ = ["coerce", "describe", "check_line_text", "CONTROL", "INT_LIMIT"]

INT_LIMIT = 2**63
"""Integers must fit in 64 bits (TOML's own limit); JSON bodies are held to the same."""
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters (tab and newline included): never part of a name, a path or an id."""


def check_line_text(value: str, *, key: str, where: str | None = None) -> str:
    """A one-line text value (a name, a path, an id): no control characters, no NUL."""
    m = CONTROL.search(value)
    if m:
        raise WorkbenchError(f"{key} holds a control character ({m.group()!r} at position "
                             f"{m.start() + 1})", where=where, hint="remove it")
    return value
