"""Old flag spellings that keep working: the value is taken, and a one-line note on stderr
names the flag to use instead (``add_old_spelling``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


class _OldSpelling(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"note: {option_string} is now {self.new} (the old spelling still works)",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_old_spelling(p: argparse.ArgumentParser | Any, old: str, *, new: str, dest: str,
                     **kwargs: Any) -> None:
    """``old`` sets ``dest`` as ``new`` does; it is left out of ``--help``."""
    p.add_argument(old, dest=dest, action=_OldSpelling, new=new, help=argparse.SUPPRESS,
                   default=argparse.SUPPRESS, **kwargs)


SWEEP_ACTIONS = ("run", "show")
"""``sweep``'s actions (``workbench/commands/sweep.py``)."""


def sweep_config_spelling(argv: list[str], options_with_value: tuple[str, ...]) -> list[str]:
    """``sweep CONFIG …`` (the old spelling of ``sweep run CONFIG …``): ``argv`` with ``run``
    put in, and a note on stderr; any other ``argv`` as it is. ``options_with_value``: the
    top-level options that take the next word."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # the top-level options before the command
        i += 2 if argv[i] in options_with_value else 1
    if i >= len(argv) - 1 or argv[i] != "sweep" or argv[i + 1] in (*SWEEP_ACTIONS, "-h", "--help"):
        return argv
    print("note: `sweep CONFIG` is now `sweep run CONFIG` (the old spelling still works)",
          file=sys.stderr)
    return [*argv[: i + 1], "run", *argv[i + 1:]]
