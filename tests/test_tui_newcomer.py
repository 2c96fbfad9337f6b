"""What a newcomer driving the real 270M through the TUI tripped on,
driven with keys as a person types them (Pilot, 80×24, the static engine stand-in).

The README's path: Models → the starter → ``enter`` → Configure, whose first key must not
land in a field; the starter brings a real model's defaults, each field says where its
value came from, and its example config (``examples/real-270m.toml``) is offered and opened
in two keys, so that ``ctrl+l`` sends exactly the example's config.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from fixtures_tui import StaticClient, settle, until
from textual.widgets import Button, DataTable, Input, Tabs

from adapters_lib.config import RunConfig, load_config
from adapters_lib.engine import api
from adapters_lib.runs.registry import create_run, default_name
from adapters_lib.runs.state import RunState
from workbench.app import WorkbenchApp

SIZE = (80, 24)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "real-270m.toml"
pytestmark = pytest.mark.anyio


def text(app, selector: str) -> str:
    return str(app.screen.query_one(selector).render())


class LaunchingClient(StaticClient):
    """The stand-in, keeping each config Launch sends; ``devices`` CPU devices; the engine's
    resident memory grows by 1 MiB a status call."""

    def __init__(self, devices: int = 8) -> None:
        self.sent: list[dict] = []
        self.devices = devices
        self.calls = itertools.count()

    def status_json(self) -> dict:
        s = super().status_json()
        s["devices"] = s["devices"][: self.devices]
        s["memory"] = {**s["memory"], "engine_rss_bytes": (900 + next(self.calls)) * 2**20}
        return s

    def call(self, cmd: api.Command, *, timeout: float | None = None):
        if isinstance(cmd, api.CreateRun):
            self.sent.append(cmd.config)
            return api.RunSummary(id="20260101-120000-demo", state=RunState.QUEUED)
        return super().call(cmd, timeout=timeout)


async def test_the_readme_path_picks_the_starter_opens_its_example_and_launches_it():
    client = LaunchingClient(devices=1)
    app = WorkbenchApp(client, mode="models", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")  # the starter, "picks it for Configure"
        await settle(pilot)
        assert app.current_mode == "configure"
        assert isinstance(app.focused, Tabs)  # not a field: the screen keys work
        await pilot.press("2")  # the README's next key
        await settle(pilot)
        assert app.screen.query_one("#f-mesh-data", Input).value == "1"
        assert not app.screen.query_one("#launch", Button).disabled

        # a real model's defaults, each saying where it came from
        assert app.screen.query_one("#f-train-learning_rate", Input).value == "0.0002"
        assert app.screen.query_one("#f-train-steps", Input).value == "60"
        assert app.screen.query_one("#lora-rank", Input).value == "16"
        assert text(app, "#o-train-learning_rate") == "real-model default"
        assert text(app, "#o-train-seed") == "built-in default"
        assert "rank: real-model default" in text(app, "#lora-origin")
        assert "peers (Unsloth, PEFT, Axolotl)" in text(app, "#defaults-why")
        name = app.screen.query_one("#f-run-name", Input)
        assert name.value == "" and name.placeholder.startswith("gemma-3-270m-demo-tasks")

        # on the demo tasks: its example is offered, two keys open it
        assert "ctrl+o enter → examples/real-270m.toml" in text(app, "#config-status")
        await pilot.press("ctrl+o", "enter")
        await settle(pilot)
        assert text(app, "#o-train-learning_rate") == "from real-270m.toml"
        assert text(app, "#o-train-seed") == "built-in default"  # the file does not set it
        assert "its example" not in text(app, "#config-status")
        await pilot.press("ctrl+l")
        await settle(pilot)
    assert client.sent == [load_config(EXAMPLE).to_dict()]


async def test_mesh_fields_take_only_what_they_mean_and_an_error_is_shown_whole():
    """The Mesh page in one app (one start of the form, ~0.6 s of CPU each): the devices are
    counted and each field takes only what it means; then, at 80 columns, a mesh error under
    the form is shown whole. It read "✗ [mesh]: mesh 9×1×-1 cannot fill 1 devices (1 is not
    a" and stopped."""
    app = WorkbenchApp(LaunchingClient(devices=1), mode="configure", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        page = text(app, "#mesh-note") + text(app, "#device-grid")
        assert "1 cpu device ·" in page and "0 = all" not in page
        devices = app.screen.query_one("#f-mesh-devices", Input)
        assert devices.value == "" and devices.placeholder == "all 1"
        await pilot.press("enter")  # from the page tabs into the first field
        data = app.screen.query_one("#f-mesh-data", Input)
        assert app.focused is data
        await pilot.press("ctrl+u", "x", "0")  # a letter never gets in; 0 is no axis size
        await settle(pilot)
        assert data.value == "0" and data.has_class("-invalid")
        assert app.screen.query_one("#launch", Button).disabled
        await pilot.press("backspace", "1", "escape", "2")  # escape: keys are screen keys again
        await settle(pilot)
        assert data.value == "1" and not data.has_class("-invalid")
        assert not app.screen.query_one("#launch", Button).disabled

        # at 80 columns a mesh error under the form is shown whole
        assert isinstance(app.focused, Tabs)
        await pilot.press("enter", "ctrl+u", "9")  # into the Mesh page's first field: data 9
        await settle(pilot)
        assert app.focused is data and data.value == "9"
        status = app.screen.query_one("#config-status")
        shown = str(status.render())
        assert shown.startswith("✗") and "9" in shown and len(shown) > status.size.width
        assert status.size.height * status.size.width >= len(shown)  # wrapped, not cut
        assert app.screen.query_one("#launch", Button).disabled


async def test_a_typed_value_stays_when_the_model_changes_and_defaults_follow_the_model():
    app = WorkbenchApp(LaunchingClient(), mode="models", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")  # the starter
        await settle(pilot)
        await pilot.press("right", "right", "right", "tab", "tab", "tab")  # Train page: steps
        steps = app.screen.query_one("#f-train-steps", Input)
        assert app.focused is steps
        await pilot.press("ctrl+u", *"30", "escape", "1", "up", "enter")  # then the demo
        await settle(pilot)
        assert app.current_mode == "configure"
        assert app.screen.query_one("#f-model-source", Input).value == "demo"
        assert steps.value == "30" and text(app, "#o-train-steps") == "yours"
        assert app.screen.query_one("#f-train-learning_rate", Input).value == "0.001"
        assert text(app, "#o-train-learning_rate") == "demo default"
        assert app.screen.query_one("#f-run-name", Input).placeholder.startswith("demo ")


async def test_the_train_header_memory_is_live(monkeypatch):
    from workbench.screens import train

    monkeypatch.setattr(train, "MEMORY_S", 0.1)
    app = WorkbenchApp(LaunchingClient(), mode="models", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        seen = set()
        for _ in range(40):
            await pilot.pause(0.1)
            app.screen.redraw()
            seen.add(text(app, "#train-memory"))
            if len(seen) >= 3:
                break
        assert len(seen) >= 3, seen  # 900 MiB, 901 MiB, … as the engine grows


async def test_runs_name_their_model_and_a_run_is_named_by_its_model_and_data(tmp_path):
    app = WorkbenchApp(LaunchingClient(), mode="runs", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#runs-table", DataTable)
        assert [c.label.plain for c in table.columns.values()][:3] == ["✓", "run", "model"]
        assert table.get_row_at(0)[2] == "demo"

    starter = RunConfig().replace(model=type(RunConfig().model)(source="starter:gemma-3-270m"))
    assert create_run(starter, root=tmp_path).run_id.endswith("-gemma-3-270m-demo-tasks")
    assert create_run(RunConfig(), root=tmp_path).run_id.endswith("-demo")
    assert default_name("hf:google/gemma-3-1b-it", "/data/answer-format/train.jsonl") == \
        "gemma-3-1b-it-answer-format"


class RunningClient(StaticClient):
    """The stand-in with its first run still training at step 20 of 40 (0.35 s a step)."""

    def _summary(self, rid: str) -> dict:
        return {**super()._summary(rid), "state": "running", "step": 20}

    def _record(self, rid: str, metrics: bool = True, events: bool = True) -> dict:
        record = super()._record(rid, metrics, events)
        return {**record, "metrics": record["metrics"][:20]} if metrics else record

    def stream(self, cmd: api.Command):
        if isinstance(cmd, api.StreamRun):  # the run goes on: no end yet
            return iter([api.stream_item("replayed", {}, cmd.items)])
        return super().stream(cmd)


async def test_at_80_columns_the_train_header_shows_a_running_runs_eta():
    """The header read "… loss 2.027 eval 2.295@100 1.85s/ste…": the ETA was cut off."""
    app = WorkbenchApp(RunningClient(), mode="train", run_id="20260101-120000-demo", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        title = app.screen.query_one("#train-title")
        await until(pilot, lambda: "ETA" in str(title.render()), timeout=30,
                    what="the 2 Hz redraw's ETA")
        text = str(title.render())
        assert "running 20/40" in text and "ETA 7s" in text
        assert text.index("ETA 7s") + len("ETA 7s") <= title.size.width  # shown, not cut
