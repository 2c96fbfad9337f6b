"""Configure: mesh, LoRA, data, hyperparameters, memory fit, the equivalent TOML, Launch.

Every change re-validates the whole config with ``adapters_lib.config.config_from_dict``
(the same checks as a TOML file), so the one-line error under the form is the one the CLI
would print. A valid config is sent to the engine's estimate route (a worker, at most one in
flight, debounced) which fills the memory-fit bar, the trainable-parameter count and the
sharding problems. Launch sends it to ``create_run`` and opens the Train screen on the run.

Keys: arriving here puts the focus in the first field of the page; ``escape`` leaves a field
for the tab strip (``←`` ``→`` switch pages, ``tab`` goes back into the page). From ~120
columns the equivalent TOML stands beside the form, live.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import (
    Button,
    Checkbox,
    Footer,
    Input,
    Select,
    Static,
    TabbedContent,
    Tabs,
)

from adapters_lib.config import (
    MeshSpec,
    RunConfig,
    config_from_dict,
    load_config,
)
from adapters_lib.errors import WorkbenchError
from workbench.screens.base import WorkbenchScreen, error_text, is_text_field
from workbench.screens.configure_form import (
    DATA_FIELDS,
    MESH_FIELDS,
    TRAIN_FIELDS,
    field_id,
    form_pages,
)
from workbench.screens.configure_text import data_report_text, device_info, estimate_view
from workbench.screens.prompt import PromptScreen
from workbench.widgets.device_grid import DeviceGrid
from workbench.widgets.lora_form import LoraForm, parse_number, trainable_count
from workbench.widgets.memory_fit import MemoryFitBar, fits_from_estimate
from workbench.widgets.nav import NavBar
from workbench.widgets.waits import Wait

DEBOUNCE_S = 0.3


class ConfigureScreen(WorkbenchScreen):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch", id="configure.launch"),
        Binding("ctrl+s", "save_toml", "Save TOML", id="configure.save"),
        Binding("ctrl+o", "open_toml", "Open TOML", id="configure.open", show=False),
        # priority: a field's own ctrl+d (delete right) must not swallow it
        Binding("ctrl+d", "check_data", "Check data", id="configure.check_data", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__(name="configure")
        self.device_count = 0
        self.device_kind = ""
        self.config: RunConfig | None = None
        self.error: str = ""
        self.estimate_result: dict[str, Any] = {}
        self.catalog: dict[str, dict[str, Any]] = {}
        self._debounce = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        base: RunConfig = getattr(self.app, "config_defaults", None) or RunConfig()
        choice = getattr(self.app, "model_choice", None)
        if choice:
            base = base.replace(model=type(base.model)(source=choice))
        d = base.to_dict()
        yield NavBar("configure")
        with Horizontal(id="configure-main"):
            with TabbedContent(id="configure-tabs"):
                yield from form_pages(base, d)
            with VerticalScroll(id="configure-side", classes="detail"):
                yield Static("[b]run.toml[/b] [dim]what Launch sends (ctrl+s saves it)[/]",
                             classes="side-title")
                yield Static("", id="toml-side", classes="toml", markup=False)
        with Vertical(id="configure-bottom"):
            yield MemoryFitBar(id="memory-fit")
            with Horizontal(classes="launch-row"):
                yield Static("", id="config-status")
                yield Button("Launch (ctrl+l)", id="launch", variant="primary", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.base_config: RunConfig = getattr(self.app, "config_defaults", None) or RunConfig()
        self.data_wait: Wait | None = None
        self.load_devices()
        self.revalidate()
        self.set_interval(0.25, self.tick_waits)

    def tick_waits(self) -> None:
        """The waits of this screen tick: the engine's devices, a data check."""
        if not self.device_count:
            self.show_mesh()
        if self.data_wait is not None:
            self.query_one("#data-report", Static).update(f"[dim]{self.data_wait.text()}[/]")

    def on_screen_resume(self) -> None:
        """Arriving: the focus goes to the first field of the page (unless a field has it)."""
        if not is_text_field(self.focused):
            self.call_after_refresh(self.focus_first_field)

    def focus_first_field(self) -> None:
        pane = self.query_one(TabbedContent).active_pane
        if pane is None:
            return
        for widget in pane.query("Input, Select, Checkbox"):
            if widget.focusable:
                widget.focus()
                return
        self.query_one(TabbedContent).query_one(Tabs).focus()  # a page with no field (TOML)

    def leave_field(self) -> None:
        """escape: from a field to the tab strip, where ← → switch pages."""
        self.query_one(TabbedContent).query_one(Tabs).focus()

    # ------------------------------------------------------------------ reading the form

    def form_dict(self) -> dict[str, dict[str, Any]]:
        raw = self.base_config.to_dict()
        for section, key, _, kind in MESH_FIELDS + DATA_FIELDS + TRAIN_FIELDS:
            text = self.query_one(f"#{field_id(section, key)}", Input).value
            raw[section][key] = text.strip() if kind is str else (
                parse_number(text, kind) if text.strip() else None)
        raw["data"]["format"] = str(self.query_one(f"#{field_id('data', 'format')}", Select).value)
        raw["data"]["packing"] = self.query_one(f"#{field_id('data', 'packing')}", Checkbox).value
        raw["train"]["schedule"] = str(
            self.query_one(f"#{field_id('train', 'schedule')}", Select).value)
        raw["model"]["quantize"] = str(
            self.query_one(f"#{field_id('model', 'quantize')}", Select).value)
        raw["lora"].update(self.query_one(LoraForm).values())
        return raw

    def build_config(self) -> RunConfig:
        raw = self.form_dict()
        for section, values in raw.items():
            for key, value in values.items():
                if value is None:
                    raise WorkbenchError(f"{section}.{key} is empty", where=f"[{section}]",
                                         hint="type a value")
        cfg = config_from_dict(raw, source="form", base_dir=Path.cwd())  # typed paths: ours
        if self.device_count:
            if cfg.mesh.devices > self.device_count:
                raise WorkbenchError(f"mesh.devices is {cfg.mesh.devices}, but the engine has "
                                     f"{self.device_count}", where="[mesh] devices",
                                     hint="use 0 for all devices")
            cfg.mesh.resolve(self.used_devices(cfg.mesh.devices))
        return cfg

    def used_devices(self, devices: Any) -> int:
        """The devices a run uses: ``mesh.devices`` when set (and sane), else all."""
        if isinstance(devices, int) and 0 < devices <= self.device_count:
            return devices
        return self.device_count

    # ------------------------------------------------------------------ reacting

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _changed(self, event) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.revalidate)

    def revalidate(self) -> None:
        self._debounce = None
        status = self.query_one("#config-status", Static)
        self.show_mesh()
        try:
            self.config = self.build_config()
        except WorkbenchError as err:
            self.config, self.error = None, str(err)
            status.update(f"[b red]✗[/] {err}")
            self.query_one("#launch", Button).disabled = True
            return
        self.error = ""
        status.update("[b green]✓[/] config valid")
        self.query_one("#launch", Button).disabled = False
        toml = self.config.to_toml()
        self.query_one("#toml-preview", Static).update(toml)
        self.query_one("#toml-side", Static).update(toml)
        self.show_trainable()
        self.estimate(self.config)

    def show_trainable(self) -> None:
        """The adapter size from the catalog's architecture (instant; the estimate refines)."""
        if self.config is None:
            return
        model = self.catalog.get(self.config.model.source) or {}
        arch = model.get("arch") or {}
        total = model.get("params") if isinstance(model.get("params"), int) else None
        lora = self.config.lora
        if not lora.enabled:
            self.query_one(LoraForm).set_trainable(total, total)
            return
        count = trainable_count(arch, {"rank": lora.rank, "targets": lora.targets})
        self.query_one(LoraForm).set_trainable(count, total)

    def show_mesh(self) -> None:
        values = []
        for section, key, _, _ in MESH_FIELDS:
            v = parse_number(self.query_one(f"#{field_id(section, key)}", Input).value, int)
            values.append(v if isinstance(v, int) else 0)
        note = self.query_one("#mesh-note", Static)
        *axes, devices = values
        used = self.used_devices(devices)
        shape = tuple(axes)
        if used and -1 in shape:
            try:
                shape = MeshSpec(*shape).resolve(used).shape
            except WorkbenchError:
                pass
        problems = list(self.estimate_result.get("problems") or []) if self.config else []
        self.query_one(DeviceGrid).show(used, shape, self.device_kind,
                                        [str(p) for p in problems][:6])
        if not self.device_count:
            note.update(f"[dim]asking the engine for its devices… "
                        f"{self.app.engine_note()}[/]")  # type: ignore[attr-defined]
        else:
            note.update(f"data × fsdp × tensor must equal {used} (one axis may be -1: it "
                        f"fills) · devices: 0 = all {self.device_count}")

    @work(thread=True, exclusive=True, group="devices")
    def load_devices(self) -> None:
        status = self.engine(self.client.status, wait=True)
        if status is None:
            return
        models = self.engine(self.client.models) or []
        self.ui(self.set_devices, *device_info(status),
                {str(m.get("id")): m for m in models if isinstance(m, dict)})

    def set_devices(self, count: int, kind: str, catalog: dict[str, dict[str, Any]]) -> None:
        self.device_count, self.device_kind, self.catalog = count, kind, catalog
        self.revalidate()

    @work(thread=True, exclusive=True, group="estimate")
    def estimate(self, config: RunConfig) -> None:
        try:
            reply = self.client.estimate(config.to_dict())
        except Exception as err:  # noqa: BLE001 - shown in the bar, not as a pop-up per keystroke
            self.ui(self.query_one(MemoryFitBar).set_fits, [],
                    f"no estimate: {error_text(err)}")
            return
        self.ui(self.show_estimate, estimate_view(reply))

    def show_estimate(self, result: dict[str, Any]) -> None:
        self.estimate_result = result
        fits = fits_from_estimate(result)
        note = str(result.get("summary") or "")
        self.query_one(MemoryFitBar).set_fits(fits, note if fits else "no per-device estimate")
        if result["errors"] and self.config is not None:
            self.query_one("#config-status", Static).update(
                f"[b red]✗[/] mesh: {escape(result['errors'][0])}")
            self.query_one("#launch", Button).disabled = True
        trainable = result.get("trainable_params")
        if isinstance(trainable, int):
            self.query_one(LoraForm).set_trainable(
                trainable, result.get("total_params"))
        self.show_mesh()

    # ------------------------------------------------------------------ actions

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field moves to the next one, like a form."""
        event.stop()
        self.focus_next()

    def use_model(self, source: str) -> None:
        self.query_one(f"#{field_id('model', 'source')}", Input).value = source

    @on(Button.Pressed, "#launch")
    def _launch_pressed(self) -> None:
        self.action_launch()

    @on(Button.Pressed, "#check-data")
    def _check_pressed(self) -> None:
        self.action_check_data()

    def action_launch(self) -> None:
        try:
            cfg = self.build_config()
        except WorkbenchError as err:
            self.notify(str(err), title="cannot launch", severity="error", timeout=8)
            return
        self.notify("launching…", timeout=3)
        self.launch(cfg)

    @work(thread=True, exclusive=True, group="launch")
    def launch(self, cfg: RunConfig) -> None:
        run = self.engine(self.client.create_run, cfg.to_dict())
        if run is not None:
            run_id = str(run["id"])
            self.ui(self.app.open_run, run_id, "train")  # type: ignore[attr-defined]

    def action_check_data(self) -> None:
        try:
            raw = self.form_dict()
        except WorkbenchError as err:
            self.notify(str(err), severity="error")
            return
        self.data_wait = Wait("checking the data (reads and tokenizes up to 2000 records)")
        self.query_one("#data-report", Static).update(f"[dim]{self.data_wait.what}…[/]")
        self.check_data(raw)

    def key_ctrl_b(self) -> None:
        # a key handler, not a Binding yet: a Binding adds a row to the help screen's snapshots
        self.action_browse_data()

    def action_browse_data(self) -> None:
        """ctrl+b: the datasets on this machine (``screens.data_browser``); enter sets [data] path."""
        from workbench.screens.data_browser import DataBrowserScreen

        try:
            raw = self.form_dict()
        except WorkbenchError:
            raw = {"data": {}}

        def chosen(name: str | None) -> None:
            if name:
                self.query_one(f"#{field_id('data', 'path')}", Input).value = name

        self.app.push_screen(DataBrowserScreen(raw, self.client), chosen)

    @work(thread=True, exclusive=True, group="data")
    def check_data(self, raw: dict[str, Any]) -> None:
        try:
            report = self.client.data_check(raw["data"]["path"], format=raw["data"]["format"],
                                            config=raw, limit=2000)
        except Exception as err:  # noqa: BLE001
            self.ui(self.show_data_report, f"[b red]✗[/] {error_text(err)}")
            return
        self.ui(self.show_data_report, data_report_text(report))

    def show_data_report(self, text: str) -> None:
        self.data_wait = None
        self.query_one("#data-report", Static).update(text)

    def fill_form(self, cfg: RunConfig) -> None:
        """Show ``cfg`` in the form; keys the form has no field for are kept as they are."""
        self.base_config = cfg
        d = cfg.to_dict()
        for section, key, _, kind in MESH_FIELDS + DATA_FIELDS + TRAIN_FIELDS:
            value = d[section][key]
            self.query_one(f"#{field_id(section, key)}", Input).value = (
                f"{value:g}" if kind is float else str(value))
        self.query_one(f"#{field_id('data', 'format')}", Select).value = cfg.data.format
        self.query_one(f"#{field_id('data', 'packing')}", Checkbox).value = cfg.data.packing
        self.query_one(f"#{field_id('train', 'schedule')}", Select).value = cfg.train.schedule
        self.query_one(f"#{field_id('model', 'quantize')}", Select).value = cfg.model.quantize
        self.query_one(LoraForm).show_spec(cfg.lora)

    def action_open_toml(self) -> None:
        def load(path: str | None) -> None:
            if not path:
                return
            try:
                cfg = load_config(Path(path.strip()).expanduser())
            except WorkbenchError as err:
                self.notify(str(err), title="cannot open", severity="error", timeout=8)
                return
            self.fill_form(cfg)
            self.notify(f"loaded {path.strip()}", timeout=3)

        self.app.push_screen(PromptScreen("Open a run config (TOML)", "path.toml"), load)

    def action_save_toml(self) -> None:
        if self.config is None:
            self.notify(self.error or "the config is not valid yet", severity="error")
            return
        cfg = self.config

        def save(path: str | None) -> None:
            if not path:
                return
            target = Path(path).expanduser()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(cfg.to_toml(), encoding="utf-8")
            except OSError as err:
                self.notify(f"could not save: {err}", severity="error")
                return
            self.notify(f"saved {target}\nrun it with: gemma-workbench train {target}", timeout=6)

        self.app.push_screen(PromptScreen("Save the config as TOML", "path.toml",
                                          str(Path.cwd() / "run.toml")), save)


SCREEN = ConfigureScreen
