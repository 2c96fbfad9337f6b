"""Ctrl-C for a command that follows a stream (``train``, ``runs attach``): never lost.

CPython raises ``KeyboardInterrupt`` wherever the main thread is when it checks for signals.
Landing in a finalizer (an object's ``__del__``, a generator the collector closes) it is
printed as "Exception ignored" and dropped, and the command would go on following. Under
``interrupts()`` a Ctrl-C is also remembered: ``check()`` after each streamed item raises it
again until the command's handler says it was taken.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Interrupts:
    """The Ctrl-Cs not yet taken by the command (``pending``)."""

    def __init__(self) -> None:
        self.pending = 0

    def on_sigint(self, signum: int, frame: Any) -> None:
        self.pending += 1
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` for a Ctrl-C whose first exception was lost."""
        if self.pending:
            raise KeyboardInterrupt

    def taken(self) -> None:
        """The command's handler has acted on every Ctrl-C so far."""
        self.pending = 0


@contextlib.contextmanager
def interrupts() -> Iterator[Interrupts]:
    """SIGINT remembered while the block runs (the main thread only; a shell that started
    the command with SIGINT ignored, as for ``cmd &``, keeps it ignored)."""
    tracker = Interrupts()
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield tracker
        return
    previous = signal.signal(signal.SIGINT, tracker.on_sigint)
    try:
        yield tracker
    finally:
        signal.signal(signal.SIGINT, previous)
