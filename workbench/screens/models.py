"""Models: the weights catalog as a table, with a detail pane; rescan; add a folder."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Static

from workbench.screens.base import WorkbenchScreen
from workbench.screens.prompt import PromptScreen
from workbench.widgets.memory_fit import gib
from workbench.widgets.nav import NavBar

COLUMNS = ("id", "status", "family", "size", "params", "bytes", "variant", "format")
"""Most telling first: at 80 columns the table scrolls sideways past the last ones."""


def human_count(n: Any) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return "—"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def model_row(m: dict[str, Any]) -> tuple[str, ...]:
    size = m.get("bytes")
    return (str(m.get("id", "?")), str(m.get("status", "")), str(m.get("family", "")),
            str(m.get("size", "")), human_count(m.get("params")),
            gib(size) if isinstance(size, (int, float)) and size else "—",
            str(m.get("variant", "")), str(m.get("format", "")))


def model_detail(m: dict[str, Any]) -> str:
    lines = [f"[b]{m.get('id', '?')}[/b]"]
    for key in ("path", "checkpoint", "tokenizer", "source", "format", "status", "reason"):
        if m.get(key):
            lines.append(f"[dim]{key}:[/] {m[key]}")
    config = m.get("arch") or m.get("config") or {}
    if isinstance(config, dict) and config:
        lines.append("[b]config[/b]")
        lines += [f"  {k} = {v}" for k, v in list(config.items())[:24]]
    problems = m.get("problems") or []
    if problems:
        lines.append("[b red]problems[/]")
        lines += [f"  ⚠ {p}" for p in problems]
    else:
        lines.append("[green]no problems found[/]")
    return "\n".join(lines)


class ModelsScreen(WorkbenchScreen):
    BINDINGS = [
        Binding("r", "rescan", "Rescan", id="models.rescan"),
        Binding("a", "add_folder", "Add folder", id="models.add_folder"),
        Binding("enter", "use_model", "Use in Configure", id="models.use", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="models")
        self.catalog: list[dict[str, Any]] = []
        self.folders: list[str] = []

    def compose(self) -> ComposeResult:
        yield NavBar("models")
        with Horizontal(classes="split"):
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="models-detail", classes="detail"):
                yield Static("loading the catalog…", id="models-detail-text")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.load()

    @work(thread=True, exclusive=True, group="models")
    def load(self, rescan: bool = False) -> None:
        """The catalog scans on every call: a rescan is just another call."""
        catalog = self.engine(self.client.models, folders=tuple(self.folders))
        if catalog is not None:
            self.ui(self.show_catalog, catalog)

    def show_catalog(self, catalog: list[dict[str, Any]]) -> None:
        self.catalog = list(catalog)
        table = self.query_one(DataTable)
        table.clear()
        for m in self.catalog:
            table.add_row(*model_row(m), key=str(m.get("id")))
        if not self.catalog:
            self.query_one("#models-detail-text", Static).update(
                "No weights found. Press [b]a[/b] to add a folder, or use the demo model.")
        else:
            self.show_detail(0)

    def show_detail(self, index: int) -> None:
        if 0 <= index < len(self.catalog):
            self.query_one("#models-detail-text", Static).update(model_detail(self.catalog[index]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_use_model()

    def action_rescan(self) -> None:
        self.notify("rescanning…", timeout=2)
        self.load(rescan=True)

    def action_add_folder(self) -> None:
        def added(folder: str | None) -> None:
            if folder:
                self.folders.append(folder.strip())
                self.load(rescan=True)

        self.app.push_screen(PromptScreen("Add a folder of weights", "path, e.g. ~/models/gemma"),
                             added)

    def action_use_model(self) -> None:
        table = self.query_one(DataTable)
        if not self.catalog or table.cursor_row is None:
            return
        choice = str(self.catalog[table.cursor_row].get("id", "demo"))
        self.app.model_choice = choice  # type: ignore[attr-defined]
        self.notify(f"model {choice} → Configure", timeout=3)
        self.app.action_show("configure")  # type: ignore[attr-defined]

        def tell() -> None:
            use = getattr(self.app.screen, "use_model", None)
            if use is not None:
                use(choice)

        self.app.call_after_refresh(tell)


SCREEN = ModelsScreen
