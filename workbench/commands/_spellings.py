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
