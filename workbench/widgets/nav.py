"""The one-line strip at the top of every screen: the screens (clickable, with their keys)
and, on the right, what the engine is doing (starting, importing JAX, ready) with the time.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

ENTRIES = (("1", "models", "Models"), ("2", "configure", "Configure"), ("3", "train", "Train"),
           ("4", "compare", "Compare"), ("5", "runs", "Runs"), ("?", "help", "Help"))
TICK_S = 0.25


def nav_markup(current: str) -> str:
    parts = []
    for key, name, label in ENTRIES:
        style = "reverse bold" if name == current else "bold"
        parts.append(f"[@click=app.show('{name}')][{style}] {key} {label} [/][/]")
    return "".join(parts)


class NavBar(Horizontal):
    DEFAULT_CLASSES = "nav"

    def __init__(self, current: str):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        yield Static(nav_markup(self.current), markup=True, classes="nav-links")
        yield Static("", id="engine-note", classes="nav-engine")

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(TICK_S, self.tick)

    def tick(self) -> None:
        text = getattr(self.app, "engine_note", lambda: "")()
        note = self.query_one("#engine-note", Static)
        if str(note.content) != text:
            note.update(text)
