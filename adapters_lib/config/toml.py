"""Reading a run config's TOML: a file's table and text, or text's table; every failure is one
clear line citing the file (and line) — for ``config`` and the engine's ``config_toml``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError


def read_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """A TOML file's table and text; a missing, unreadable or invalid file is one clear error."""
    p = Path(path)
    if p.is_dir():
        raise WorkbenchError(f"{str(p)!r} is a folder, not a config file", where=str(p),
                             hint="pass the path of a .toml run config")
    if not p.is_file():
        what = "not found" if not p.exists() else "not a regular file"
        raise WorkbenchError(f"config file {str(p)!r} {what}", where=str(p),
                             hint="pass the path of a .toml run config")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise WorkbenchError(f"cannot read the config: {e.strerror or e}", where=str(p)) from None
    if b"\0" in data:
        raise WorkbenchError("config is a binary file, not TOML text", where=str(p),
                             hint="pass the path of a .toml run config")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise WorkbenchError(f"config is not UTF-8 text (byte 0x{data[e.start]:02x})",
                             where=f"{p}:{line}", hint="save the file as UTF-8") from None
    return parse_toml(text, str(p)), text


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML text → a table; a syntax error cites ``source:line`` (also for the engine's
    ``config_toml``: nesting too deep is an error here, not a RecursionError)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # Python 3.14 gives .lineno/.msg; 3.12 only says "(at line N, column M)" in the text.
        at = re.search(r"\s*\(at line (\d+), column \d+\)", str(e))
        line = getattr(e, "lineno", None) or (int(at.group(1)) if at else None)
        msg = getattr(e, "msg", None) or (str(e)[:at.start()] if at else str(e))
        raise WorkbenchError(f"invalid TOML: {msg}", where=f"{source}:{line}" if line else source,
                             hint="fix the syntax at that line") from None
    except RecursionError:
        raise WorkbenchError("invalid TOML: nested too deeply", where=source) from None
    except ValueError:  # an integer of thousands of digits (int()'s 4300-digit limit)
        long = re.search(r"[0-9_]{4000,}", text)
        line = text.count("\n", 0, long.start()) + 1 if long else None
        raise WorkbenchError("invalid TOML: an integer of more than 4300 digits",
                             where=f"{source}:{line}" if line else source,
                             hint="integers must fit in 64 bits") from None
