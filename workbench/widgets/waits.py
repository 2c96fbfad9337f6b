"""Waits the user can see: what the TUI is waiting for, and for how long.

``Wait`` is a label plus its start time; ``text()`` reads ``"4.2 s · importing JAX"`` (the time
first: at 80 columns a long label is cut at its end, never the clock). A
``WaitNote`` is a one-line widget that shows the wait it was given, ticking four times a
second while it lasts (after ``SHOW_AFTER_S``, so a quick answer never flickers), and a plain
line once it is done. Screens hold one per slow call (catalog, devices, a compare).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.markup import escape
from textual.widgets import Static

SHOW_AFTER_S = 0.3
TICK_S = 0.25
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass(frozen=True)
class Wait:
    what: str
    started: float = field(default_factory=time.monotonic)
    hint: str = ""
    """What the user can do meanwhile (``"ctrl+x cancels"``), shown after the time."""

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def text(self, now: float | None = None) -> str:
        seconds = (now if now is not None else time.monotonic()) - self.started
        hint = f" · {self.hint}" if self.hint else ""
        return f"{seconds:.1f} s · {self.what}{hint}"


def spinner(now: float | None = None) -> str:
    t = now if now is not None else time.monotonic()
    return SPINNER[int(t / 0.1) % len(SPINNER)]


class WaitNote(Static):
    """One line: the current wait (ticking) or the last result."""

    DEFAULT_CLASSES = "wait-note"

    def __init__(self, text: str = "", *, id: str | None = None, classes: str | None = None):
        super().__init__(text, id=id, classes=classes)
        self.wait: Wait | None = None
        self._timer = None

    def on_mount(self) -> None:
        self._timer = self.set_interval(TICK_S, self.tick, pause=True)

    def start(self, what: str, hint: str = "") -> None:
        self.wait = Wait(what, hint=hint)
        self.update(f"[dim]{escape(what)}…[/]")
        if self._timer is not None:
            self._timer.resume()

    def relabel(self, what: str) -> None:
        """Say something new about the same wait (its clock keeps running)."""
        if self.wait is not None:
            self.wait = Wait(what, started=self.wait.started, hint=self.wait.hint)
            self.tick()

    def done(self, text: str = "") -> None:
        self.wait = None
        if self._timer is not None:
            self._timer.pause()
        self.update(text)

    def tick(self) -> None:
        w = self.wait
        if w is None or w.elapsed < SHOW_AFTER_S:
            return
        self.update(f"[b]{spinner()}[/] {escape(w.text())}")
