"""Browse the datasets on this machine from Configure's Data page (ctrl+b): the HF datasets
cache, the TFDS data dir and the data files under the current folder — the list of
``gemma-workbench data list`` — with each one's splits, columns, labels and the field map the
run would apply, and a preview (``p``: the engine's data check of its first records, as the
model sees them). ``enter`` puts the dataset's name in ``[data] path``.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from workbench.screens.base import error_text
from workbench.screens.configure_text import data_report_text

PREVIEW_RECORDS = 200


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def detail_text(entry: dict[str, Any], data: dict[str, Any]) -> str:
    """One dataset's splits, columns, labels and how the run's [data] settings read it."""
    splits = ", ".join(f"{k} {v}" for k, v in entry.get("splits", {}).items()) or "-"
    lines = [f"[b]{escape(entry['name'])}[/b]  [dim]{escape(entry.get('location', ''))}[/]",
             f"  splits: {escape(splits)} · rows {entry.get('rows') if entry.get('rows') is not None else '-'}"
             f" · {human_bytes(entry.get('bytes'))} · format {escape(entry.get('format', '?'))}",
             f"  columns: {escape(', '.join(entry.get('columns') or []) or '-')}"]
    field_map = data.get("field_map") or {}
    if field_map:
        lines.append("  field map: " + escape(", ".join(f"{k} ← {v}" for k, v in field_map.items())))
    labels = data.get("labels") or {}
    if "label" in (entry.get("columns") or []):
        names = entry.get("labels") or []
        if labels:
            lines.append("  label → answer: " + escape(", ".join(f"{k} → {v}" for k, v in labels.items())))
        else:
            shown = f" ({'/'.join(names)})" if names else ""
            lines.append(f"  a label column{escape(shown)}: set \\[data] labels to train it as "
                         "classification, e.g. {0 = \"negative\", 1 = \"positive\"}")
    return "\n".join(lines)


class DataBrowserScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="data_browser.cancel"),
                Binding("p", "preview", "Preview", id="data_browser.preview")]

    def __init__(self, raw: dict[str, Any], client: Any) -> None:
        super().__init__()
        self.raw, self.client = raw, client
        self.entries: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="data-browser"):
            yield Label("Datasets on this machine", classes="dialog-title")
            yield DataTable(id="data-list", cursor_type="row", zebra_stripes=True)
            yield Static("[dim]looking in the HF cache, the TFDS data dir and this folder…[/]",
                         id="data-detail")
            yield Static("", id="data-preview")
            yield Label("enter: use as [data] path · p: preview · escape: cancel", classes="note")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("name", "splits", "rows", "bytes", "format")
        self.load()

    @work(thread=True, exclusive=True, group="data-list")
    def load(self) -> None:
        try:
            from adapters_lib.data.sources.listing import list_datasets

            entries = list_datasets()
        except Exception as err:  # noqa: BLE001 - shown, never swallowed
            self.app.call_from_thread(self.show_detail, f"[b red]✗[/] {escape(error_text(err))}")
            return
        self.app.call_from_thread(self.show_entries, entries)

    def show_entries(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        table = self.query_one(DataTable)
        for e in entries:
            splits = ", ".join(f"{k} {v}" for k, v in e["splits"].items()) or "-"
            table.add_row(e["name"], splits, "-" if e["rows"] is None else str(e["rows"]),
                          human_bytes(e["bytes"]), e["format"])
        if not entries:
            self.show_detail("no datasets found (HF cache, TFDS data dir, data files here)")
        else:
            table.focus()
            self.show_detail(detail_text(entries[0], self.raw.get("data", {})))

    def show_detail(self, text: str) -> None:
        self.query_one("#data-detail", Static).update(text)

    def current(self) -> dict[str, Any] | None:
        row = self.query_one(DataTable).cursor_row
        return self.entries[row] if 0 <= row < len(self.entries) else None

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        entry = self.current()
        if entry is not None:
            self.show_detail(detail_text(entry, self.raw.get("data", {})))
            self.query_one("#data-preview", Static).update("")

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        entry = self.current()
        if entry is not None:
            self.dismiss(entry["name"])

    def action_preview(self) -> None:
        entry = self.current()
        if entry is None:
            return
        self.query_one("#data-preview", Static).update("[dim]checking the first records…[/]")
        self.preview(entry["name"])

    @work(thread=True, exclusive=True, group="data-preview")
    def preview(self, name: str) -> None:
        raw = {**self.raw, "data": {**self.raw.get("data", {}), "path": name}}
        try:
            report = self.client.data_check(name, config=raw, limit=PREVIEW_RECORDS)
            text = data_report_text(report)
        except Exception as err:  # noqa: BLE001
            text = f"[b red]✗[/] {escape(error_text(err))}"
        self.app.call_from_thread(self.show_preview, text)

    def show_preview(self, text: str) -> None:
        self.query_one("#data-preview", Static).update(text)

    def action_cancel(self) -> None:
        self.dismiss(None)
