"""The one-line navigation strip at the top of every screen (clickable, shows the keys)."""

from __future__ import annotations

from textual.widgets import Static

ENTRIES = (("1", "models", "Models"), ("2", "configure", "Configure"), ("3", "train", "Train"),
           ("4", "compare", "Compare"), ("5", "runs", "Runs"), ("?", "help", "Help"))


class NavBar(Static):
    DEFAULT_CLASSES = "nav"

    def __init__(self, current: str):
        parts = []
        for key, name, label in ENTRIES:
            style = "reverse bold" if name == current else "bold"
            parts.append(f"[@click=app.show('{name}')][{style}] {key} {label} [/][/]")
        super().__init__(" ".join(parts) + "  [dim]gemma-workbench[/]", markup=True)
