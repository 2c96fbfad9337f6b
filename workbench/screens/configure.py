"""Configure: mesh, LoRA, data, hyperparameters, memory fit, the equivalent TOML, Launch.

Every change re-validates the whole config with ``adapters_lib.config.config_from_dict``
(the same checks as a TOML file), so the one-line error under the form is the one the CLI
would print. A valid config is sent to the engine's estimate route (a worker, at most one in
flight, debounced) which fills the memory-fit bar, the trainable-parameter count and the
sharding problems. Launch sends it to ``create_run`` and opens the Train screen on the run.

Keys: arriving here puts the focus on the page tabs, so the screen keys (``1``–``5``,
``ctrl+l``) work at once: ``←`` ``→`` switch pages, ``tab``, ``enter`` or ``↓`` go into the
page's first field, ``escape`` leaves a field for the tabs. ``ctrl+o`` opens a config file
(the picked model's example is offered: ``ctrl+o`` ``enter``). From ~120 columns the
equivalent TOML stands beside the form, live.

Defaults depend on the model (``adapters_lib.config.model_defaults``) and every value says where it
came from (``configure_origins``); a real model picked on the demo tasks is offered its
example config (``workbench.example_configs``).
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

from adapters_lib.config import MeshSpec, RunConfig, config_from_dict
from adapters_lib.config.model_defaults import with_model_defaults
from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from workbench.messages import EngineDevices, EstimateDone, RunLaunched
from workbench.screens.base import WorkbenchScreen, error_text
from workbench.screens.configure_ahead import ConfigAheadMixin
from workbench.screens.configure_data import ConfigDataMixin
from workbench.screens.configure_files import ConfigFilesMixin
from workbench.screens.configure_form import (
    DATA_FIELDS,
    MESH_FIELDS,
    TRAIN_FIELDS,
    field_id,
    form_pages,
)
from workbench.screens.configure_model import ModelDefaultsMixin
from workbench.screens.configure_origins import FieldOrigins
from workbench.screens.configure_text import device_info, estimate_problems
from workbench.widgets.device_grid import DeviceGrid
from workbench.widgets.lora_form import LoraForm, parse_number, trainable_count
from workbench.widgets.memory_fit import MemoryFitBar, fits_from_estimate
from workbench.widgets.nav import NavBar
from workbench.widgets.readiness import ProgramReadiness
from workbench.widgets.waits import Wait

DEBOUNCE_S = 0.3


class ConfigureScreen(ModelDefaultsMixin, ConfigFilesMixin, ConfigDataMixin, ConfigAheadMixin,
                      WorkbenchScreen):
    AUTO_FOCUS = "Tabs"
    """Arriving (with nothing focused) puts the focus on the page tabs, at once: a deferred
    focus would pull it back from a field the user already tabbed into."""
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch", id="configure.launch"),
        Binding("ctrl+o", "open_toml", "Open", id="configure.open"),
        Binding("ctrl+s", "save_toml", "Save", id="configure.save"),
        # priority: a field's own ctrl+d (delete right) must not swallow it
        Binding("ctrl+d", "check_data", "Check data", id="configure.check_data", priority=True),
        Binding("enter,down", "enter_page", "Into the page", id="configure.enter_page",
                show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="configure")
        self.device_count = 0
        self.device_kind = ""
        self.config: RunConfig | None = None
        self.error: str = ""
        self.estimate_result: api.EstimateReply | None = None
        self.catalog: dict[str, api.ModelInfo] = {}
        self._debounce = None
        self.origins = FieldOrigins()
        self.model_seen: str | None = None
        """The Models screen's pick this form has taken (a new pick replaces the model)."""
        self.suggestion: Path | None = None
        """The example config offered for the model (ctrl+o opens it)."""
        self.opened = ""

    # ------------------------------------------------------------------ layout

    def start_config(self) -> RunConfig:
        """The app's start config as given, else the defaults of the model picked on Models."""
        given = getattr(self.app, "config_defaults", None)
        if given is not None:
            return given
        choice = getattr(self.app, "model_choice", None) or "demo"
        self.model_seen = choice
        return with_model_defaults(RunConfig().replace(model=type(RunConfig().model)(source=choice)))

    def compose(self) -> ComposeResult:
        base = self.base_config = self.start_config()
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
                with Vertical(id="launch-info"):
                    yield Static("", id="config-status")
                    yield ProgramReadiness("", id="ahead-status")
                yield Button("Launch (ctrl+l)", id="launch", variant="primary", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.data_wait: Wait | None = None
        given = getattr(self.app, "config_defaults", None) is not None
        self.origins.all_from(self.base_config, self.tracked_texts(),
                              "from the start config" if given else None)
        self.model_changed(self.base_config.model.source)
        self.load_devices()
        self.revalidate()
        self.set_interval(0.25, self.tick_waits)
        self.start_ahead()

    def tick_waits(self) -> None:
        """The waits of this screen tick: the engine's devices, a data check."""
        if not self.device_count:
            self.show_mesh()
        if self.data_wait is not None:
            self.query_one("#data-report", Static).update(f"[dim]{self.data_wait.text()}[/]")

    def on_screen_resume(self) -> None:
        """Arriving: a model picked on Models since comes in (the focus: ``AUTO_FOCUS``)."""
        choice = getattr(self.app, "model_choice", None)
        if choice and choice != self.model_seen:
            self.model_seen = choice
            self.use_model(choice)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "enter_page":
            return isinstance(self.focused, Tabs)
        return super().check_action(action, parameters)

    def action_enter_page(self) -> None:
        self.focus_first_field()

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
            if section == "mesh" and key == "devices" and not text.strip():
                text = "0"  # empty: all of the engine's devices
            raw[section][key] = text.strip() if kind is str else (
                parse_number(text, kind) if text.strip() else None)
        raw["data"]["format"] = str(self.query_one(f"#{field_id('data', 'format')}", Select).value)
        raw["data"]["packing"] = self.query_one(f"#{field_id('data', 'packing')}", Checkbox).value
        raw["train"]["schedule"] = str(
            self.query_one(f"#{field_id('train', 'schedule')}", Select).value)
        raw["model"]["quantize"] = str(
            self.query_one(f"#{field_id('model', 'quantize')}", Select).value)
        raw["model"]["quantize_method"] = str(
            self.query_one(f"#{field_id('model', 'quantize_method')}", Select).value)
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
        key = self.key_of(event.control.id or "")
        if key == "model.source":
            self.model_changed(str(event.value))
        elif key in self.origins.shown and self.origins.seen(key, str(event.value)):
            self.show_origins()
        if key == "data.path":
            self.show_suggestion()
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
            status.update(f"[b red]✗[/] {escape(str(err))}")
            self.query_one("#launch", Button).disabled = True
            return
        self.error = ""
        status.update("[b green]✓[/] config valid" + self.suggestion_text())
        self.query_one("#launch", Button).disabled = False
        toml = self.config.to_toml()
        self.query_one("#toml-preview", Static).update(toml)
        self.query_one("#toml-side", Static).update(toml)
        self.show_trainable()
        self.estimate(self.config)
        self.ahead_changed(self.config)  # its programs compile ahead (a second after the last change)

    def show_trainable(self) -> None:
        """The adapter size from the catalog's architecture (instant; the estimate refines)."""
        if self.config is None:
            return
        model = self.catalog.get(self.config.model.source)
        arch = (model.arch if model else None) or {}
        total = model.params if model else None
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
        problems = (estimate_problems(self.estimate_result)
                    if self.config and self.estimate_result is not None else [])
        self.query_one(DeviceGrid).show(used, shape, self.device_kind, problems[:6])
        if not self.device_count:
            note.update(f"[dim]asking the engine for its devices… "
                        f"{self.app.engine_note()}[/]")  # type: ignore[attr-defined]
        else:
            s = "s" if used != 1 else ""
            note.update(f"data × fsdp × tensor must equal {used} (one axis may be -1: it "
                        f"fills): the {used} device{s} used (devices: empty = all "
                        f"{self.device_count})")

    @work(thread=True, exclusive=True, group="devices")
    def load_devices(self) -> None:
        status = self.engine(self.client.status, wait=True)
        if status is None:
            return
        models = self.engine(self.client.models) or []
        self.post_message(EngineDevices(*device_info(status), {m.id: m for m in models}))

    def on_engine_devices(self, message: EngineDevices) -> None:
        self.device_count, self.device_kind = message.count, message.kind
        self.catalog = message.catalog
        self.query_one(f"#{field_id('mesh', 'devices')}", Input).placeholder = \
            f"all {message.count}"
        self.revalidate()

    @work(thread=True, exclusive=True, group="estimate")
    def estimate(self, config: RunConfig) -> None:
        try:
            reply = self.client.estimate(config.to_dict())
        except Exception as err:  # noqa: BLE001 - shown in the bar, not as a pop-up per keystroke
            self.post_message(EstimateDone(None, f"no estimate: {error_text(err)}"))
            return
        self.post_message(EstimateDone(reply))

    def on_estimate_done(self, message: EstimateDone) -> None:
        if message.result is None:
            self.query_one(MemoryFitBar).set_fits([], message.error)
            return
        result = self.estimate_result = message.result
        fits = fits_from_estimate(result.devices)
        self.query_one(MemoryFitBar).set_fits(fits, (result.summary or "") if fits
                                              else "no per-device estimate")
        errors = estimate_problems(result, errors_only=True)
        if errors and self.config is not None:
            first = next(p for p in result.mesh_problems if p.level == "error")
            about = "" if first.where else "mesh: "  # problem_text names any other key
            self.query_one("#config-status", Static).update(f"[b red]✗[/] {about}{escape(errors[0])}")
            self.query_one("#launch", Button).disabled = True
        if result.trainable_params is not None:
            self.query_one(LoraForm).set_trainable(result.trainable_params, result.total_params)
        self.show_mesh()

    # ------------------------------------------------------------------ actions

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field moves to the next one, like a form."""
        event.stop()
        self.focus_next()

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
            self.post_message(RunLaunched(run.id))

    def on_run_launched(self, message: RunLaunched) -> None:
        self.app.open_run(message.run_id, "train")  # type: ignore[attr-defined]


SCREEN = ConfigureScreen
