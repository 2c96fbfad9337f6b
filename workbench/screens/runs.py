"""Runs: the history table; mark several (space) to overlay their loss curves and diff their
configs; open (enter), stop, resume, delete, export; rank sweep (``w`` then enter) relaunches
the run under the cursor with a new rank — a one-point sweep (``sweep.id``/``point`` in its
config, ``sweep show SWEEP`` reads it) — and overlays the child on its parent.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Static

from adapters_lib.config import LORA_TARGETS, config_from_dict
from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs.registry import default_name, short_ref
from workbench.messages import CurvesRead, RunActionDone, RunsListed
from workbench.screens.base import WorkbenchScreen, error_text
from workbench.screens.prompt import PromptScreen
from workbench.screens.runstate import RunView
from workbench.widgets.nav import NavBar
from workbench.widgets.plot import PlotView, Series
from workbench.widgets.waits import WaitNote

REFRESH_S = 2.0
COLUMNS = ("✓", "run", "model", "state", "step", "loss", "rank", "targets")


def flatten(config: dict[str, Any]) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, values in config.items() if isinstance(values, dict)
            for k, v in values.items()}


def config_diff(configs: dict[str, dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Keys whose values differ across the runs, with the value of each run (in order)."""
    flat = {rid: flatten(c) for rid, c in configs.items()}
    keys = sorted(set().union(*[f.keys() for f in flat.values()])) if flat else []
    out = []
    for key in keys:
        values = [flat[rid].get(key) for rid in configs]
        if len({repr(v) for v in values}) > 1:
            out.append((key, values))
    return out


def parse_sweep(text: str, lora: dict[str, Any]) -> dict[str, Any]:
    """``"16"`` → rank 16; ``"rank=4 alpha=8 targets=q,v"`` → those; the rest kept."""
    new = dict(lora)
    for part in text.replace(";", " ").split():
        key, _, value = part.partition("=")
        if not value:
            key, value = "rank", key
        key = key.strip().lower()
        if key == "targets":
            new["targets"] = [t for t in value.split(",") if t]
        elif key in ("rank", "alpha"):
            try:
                new[key] = int(value) if key == "rank" else float(value)
            except ValueError:
                raise WorkbenchError(f"{key} {value!r} is not a number", where="sweep",
                                     hint="type a rank such as 16, or rank=16 alpha=32") from None
        else:
            raise WorkbenchError(f"cannot sweep {key!r}", where="sweep",
                                 hint="sweep rank, alpha or targets")
    return new


class RunsScreen(WorkbenchScreen):
    AUTO_FOCUS = "#runs-table"
    BINDINGS = [
        Binding("space", "mark", "Mark", id="runs.mark"),
        Binding("enter", "open", "Open", id="runs.open"),
        Binding("w", "sweep", "Sweep rank", id="runs.sweep"),
        Binding("s", "stop", "Stop", id="runs.stop"),
        Binding("u", "resume", "Resume", id="runs.resume"),
        Binding("e", "export", "Export", id="runs.export"),
        Binding("x", "delete", "Delete", id="runs.delete"),
        Binding("r", "refresh", "Refresh", id="runs.refresh", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="runs")
        self.runs: list[api.RunSummary] = []
        self.marked: list[str] = []
        self.parents: dict[str, str] = {}
        self.curves: dict[str, RunView] = {}
        self.configs: dict[str, dict[str, Any]] = {}
        """Run configs by id (the list route carries none; a config never changes)."""
        self._seq = 0
        """Numbers the list and curve requests; a reply older than the one shown is dropped."""
        self._shown_seq = 0
        self._curves_seq = 0

    def compose(self) -> ComposeResult:
        yield NavBar("runs")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="runs-bottom"):
            yield PlotView("loss (marked runs)", id="runs-plot",
                           empty="mark runs with space to overlay their loss")
            with VerticalScroll(id="runs-diff", classes="detail"):
                yield Static("", id="runs-diff-text")
        yield WaitNote("", id="runs-wait")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.set_interval(REFRESH_S, self.refresh_active)

    def on_screen_resume(self) -> None:
        """Shown (the first time too): refresh the list."""
        self.load()

    def refresh_active(self) -> None:
        """Every ``REFRESH_S`` while a run is active, the list again (one request at a time: an
        engine busy compiling can answer slowly, and refreshes must not pile up)."""
        listing = any(w.group == "runs-list" and w.is_running for w in self.workers)
        if self.any_active() and not listing:
            self.load()

    def any_active(self) -> bool:
        return any(r.active for r in self.runs)

    def load(self) -> None:
        """Fetch the list (worker); replies are applied in the order they were asked for."""
        self._seq += 1
        self._load(self._seq, set(self.configs))

    @work(thread=True, group="runs-list")
    def _load(self, seq: int, known: set[str]) -> None:
        """(Thread worker) the list and the config of each run not in ``known`` (a run's config
        never changes), posted as ``RunsListed``."""
        runs = self.engine(self.client.list_runs)
        if runs is None:
            return
        configs = {}
        for r in runs:
            if r.id not in known:
                record = self.engine(self.client.get_run, r.id, metrics=False, events=False)
                configs[r.id] = (record.config if record is not None else None) or {}
        self.post_message(RunsListed(runs, configs, seq))

    def on_runs_listed(self, message: RunsListed) -> None:
        self.configs.update(message.configs)
        self.show_runs(message.runs, message.seq)

    def show_runs(self, runs: list[api.RunSummary], seq: int = 0) -> None:
        if seq < self._shown_seq:  # an older reply than the one on screen
            return
        self._shown_seq = seq
        listed_before = {r.id for r in self.runs}
        self.runs = sorted(runs, key=lambda r: r.id, reverse=True)
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        for r in self.runs:
            rid = r.id
            lora = self.configs.get(rid, {}).get("lora", {})
            model = model_text(self.configs.get(rid, {}).get("model", {}))
            table.add_row("✓" if rid in self.marked else " ", rid, model, r.state,
                          f"{r.step}/{r.total_steps or '?'}",
                          f"{r.loss:.4f}" if r.loss is not None else "—",
                          str(lora.get("rank", "—")) if lora.get("enabled", True) else "full",
                          targets_text(lora.get("targets", [])), key=rid)
        if self.runs and cursor is not None:
            table.move_cursor(row=min(cursor, len(self.runs) - 1))
        wait = self.query_one("#runs-wait", WaitNote)
        if wait.wait is None and not str(wait.content).startswith(("[green]", "[red]")):
            active = sum(1 for r in self.runs if r.active)
            wait.done(f"[dim]{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}, "
                      f"{active} active · space marks runs to overlay and diff[/]")
        # a deleted run's mark goes; a sweep child's, marked before any list has it, stays
        listed = {r.id for r in self.runs}
        self.marked = [m for m in self.marked if m in listed or m not in listed_before]
        self.load_curves(list(self.marked))

    def current(self) -> api.RunSummary | None:
        table = self.query_one(DataTable)
        if not self.runs or table.cursor_row is None or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

    # ------------------------------------------------------------------ overlay + diff

    def action_mark(self) -> None:
        r = self.current()
        if r is None:
            return
        rid = r.id
        if rid in self.marked:
            self.marked.remove(rid)
        else:
            self.marked.append(rid)
        table = self.query_one(DataTable)
        table.update_cell(rid, "✓", "✓" if rid in self.marked else " ")
        self.load_curves(list(self.marked))

    def load_curves(self, run_ids: list[str]) -> None:
        self._seq += 1
        self._load_curves(run_ids, self._seq)

    @work(thread=True, group="runs-curves")
    def _load_curves(self, run_ids: list[str], seq: int) -> None:
        records = {}
        for rid in run_ids:
            record = self.engine(self.client.get_run, rid)
            if record is not None:
                records[rid] = record
        self.post_message(CurvesRead(records, seq))

    def on_curves_read(self, message: CurvesRead) -> None:
        views = {}
        for rid, record in message.records.items():
            views[rid] = view = RunView(rid)
            view.apply_record(record)
        self.show_overlay(views, message.seq)

    def show_overlay(self, views: dict[str, RunView], seq: int = 0) -> None:
        if seq < self._curves_seq:
            return
        self._curves_seq = seq
        self.curves = views
        plot = self.query_one("#runs-plot", PlotView)
        plot.set_series([Series(short(rid), *v.series("loss")) for rid, v in views.items()])
        diff = self.query_one("#runs-diff-text", Static)
        if len(views) < 2:
            diff.update("[dim]mark two or more runs (space) to diff their configs;\n"
                        "w: rank sweep of the run under the cursor[/]")
            return
        rows = config_diff({rid: v.config for rid, v in views.items()})
        lines = ["[b]config diff[/b]  " + " | ".join(short(r) for r in views)]
        lines += [f"{k}: " + " | ".join(str(v) for v in vals) for k, vals in rows] or ["(same)"]
        diff.update("\n".join(lines))

    # ------------------------------------------------------------------ run actions

    def action_open(self) -> None:
        r = self.current()
        if r is not None:
            self.app.open_run(r.id, "train")  # type: ignore[attr-defined]

    def action_refresh(self) -> None:
        self.load()

    def _act(self, name: str, call) -> None:
        r = self.current()
        if r is None:
            self.notify("no run selected", severity="warning")
            return
        self.run_action(name, call, r.id)

    def run_action(self, name: str, call, run_id: str) -> None:
        """Start a run action: the wait shows at once, the engine answers in a worker."""
        self.query_one("#runs-wait", WaitNote).start(f"{name} {short(run_id)}")
        self.run_action_worker(name, call, run_id)

    @work(thread=True, group="runs-action")
    def run_action_worker(self, name: str, call, run_id: str) -> None:
        self.post_message(RunActionDone(name, run_id, self.engine(call, run_id)))

    def on_run_action_done(self, message: RunActionDone) -> None:
        wait = self.query_one("#runs-wait", WaitNote)
        if message.reply is None:
            wait.done(f"[red]✗ {message.name} {short(message.run_id)} failed (see the notice)[/]")
            return
        text = f"{message.name}: {message.run_id} {where_written(message.reply)}".strip()
        wait.done(f"[green]✓[/] {text}")
        self.notify(text, timeout=6)
        self.load()

    def action_stop(self) -> None:
        self._act("stop", self.client.stop_run)

    def action_resume(self) -> None:
        self._act("resume", self.client.resume_run)

    def action_export(self) -> None:
        """Choose a format (sizes estimated per quant type), then export it."""
        r = self.current()
        if r is None:
            self.notify("no run selected", severity="warning")
            return
        rid = r.id

        def chosen(choice: tuple[str, str] | None) -> None:
            if choice:
                fmt, quant = choice
                self.run_action(f"export {fmt} {quant}".strip(), lambda run_id: self.client.export(
                    run_id, format=fmt, quant=quant), rid)

        self.export_dialog_worker(rid, self.configs.get(rid), chosen)

    @work(thread=True, group="runs-action")
    def export_dialog_worker(self, rid: str, config: dict | None, chosen) -> None:
        from workbench.screens.export_dialog import ExportScreen

        if not config:
            record = self.engine(self.client.get_run, rid, metrics=False, events=False)
            config = (record.config if record is not None else None) or {}
        est = self.engine(self.client.estimate, config) if config else None  # sizes: counts only
        total, lora = (est.total_params, est.trainable_params) if est is not None else (None, None)
        self.ui(self.app.push_screen, ExportScreen(rid, config, total, lora), chosen)

    def action_delete(self) -> None:
        r = self.current()
        if r is None:
            return
        rid = r.id

        def confirmed(answer: str | None) -> None:
            if answer is not None and answer.strip().lower() in ("y", "yes", rid):
                self.marked = [m for m in self.marked if m != rid]
                self.run_action("deleted", self.client.delete_run, rid)

        self.app.push_screen(PromptScreen(f"Delete {rid} and its checkpoints? type y",
                                          "y / n"), confirmed)

    def action_sweep(self) -> None:
        r = self.current()
        if r is None:
            self.notify("no run selected", severity="warning")
            return
        rid = r.id
        lora = self.configs.get(rid, {}).get("lora") or {}
        rank = int(lora.get("rank", 8) or 8)

        def launch(text: str | None) -> None:
            if text:
                self.sweep(rid, text)

        self.app.push_screen(PromptScreen(f"Sweep {short(rid)}: new rank (or rank=… alpha=… "
                                          "targets=q,v)", "16", str(rank * 2)), launch)

    @work(thread=True, exclusive=True, group="runs-sweep")
    def sweep(self, parent: str, text: str) -> None:
        record = self.engine(self.client.get_run, parent, metrics=False, events=False)
        if record is None:
            return
        try:
            config = {k: v for k, v in (record.config or {}).items() if isinstance(v, dict)}
            before = dict(config.get("lora") or {})
            lora = parse_sweep(text, before)
            config["lora"] = lora
            name = (config.get("run") or {}).get("name") or default_name(
                str((config.get("model") or {}).get("source", "demo")),
                str((config.get("data") or {}).get("path", "demo")))
            config_from_dict(config, source="sweep")
        except WorkbenchError as err:
            self.ui(self.notify, error_text(err), title="sweep", severity="error")
            return
        # a one-point sweep: the run names its sweep and point, like `gemma-workbench sweep`
        from workbench.sweep_launch import queue_one_point

        values = {f"lora.{k}": v for k, v in lora.items() if before.get(k) != v}
        got = self.engine(queue_one_point, self.client, config,
                          values or {"lora.rank": lora.get("rank")},
                          name=f"{name}-r{lora.get('rank')}")
        if got is None:
            return
        self.ui(self.show_sweep, parent, got[1].id, lora.get("rank"))

    def show_sweep(self, parent: str, child: str, rank: Any) -> None:
        self.parents[child] = parent
        self.marked = [parent, child]
        self.notify(f"sweep {child} (rank {rank}) launched; overlaid on its parent", timeout=5)
        self.load()


def where_written(reply: Any) -> str:
    """``→ folder`` of an export's reply; "" for the other actions' replies."""
    return f"→ {reply.out}" if isinstance(reply, api.ExportReply) and reply.out else ""


def model_text(model: dict[str, Any]) -> str:
    """A run's model, short: ``starter:gemma-3-270m`` → ``gemma-3-270m`` (a Keras run says so)."""
    source = str(model.get("source") or "")
    if not source:
        return "—"
    keras = " (keras)" if model.get("backend") == "keras" else ""
    return (short_ref(source) or source) + keras


def targets_text(targets: list[str]) -> str:
    if set(targets) == set(LORA_TARGETS):
        return "all"
    return ",".join(targets) or "—"


def short(run_id: str) -> str:
    """``20260101-120000-name`` → ``120000-name`` (enough to tell runs apart in a legend)."""
    parts = run_id.split("-", 1)
    return parts[1] if len(parts) == 2 and parts[0].isdigit() else run_id


SCREEN = RunsScreen
