"""Pilot tests of what a tired user types, against the static engine stand-in.

The Configure form validates the whole config on every change (the same checks as a TOML
file): a mesh whose product is not the device count, rank 0, an empty field each disable
Launch and say why in one line; fixing the field enables it again.
"""

from __future__ import annotations

import pytest
from fixtures_tui import StaticClient, settle
from textual.widgets import Button, Input, Select, Static

from workbench.app import WorkbenchApp
from workbench.settings import load_settings

SIZE = (80, 24)
pytestmark = pytest.mark.anyio


async def set_field(pilot, app, selector: str, text: str) -> None:
    field = app.screen.query_one(selector, Input)
    field.value = text
    await settle(pilot)


def status(app) -> str:
    return str(app.screen.query_one("#config-status", Static).render())


async def test_configure_refuses_bad_mesh_rank_zero_empty_fields_and_gptq_on_a_float_base():
    """Every refusal of the form in one app (one start of the form, ~0.6 s of CPU each): a
    mesh that does not fill the devices, batch_size vs the mesh, a quantize the base cannot
    take, rank 0, an empty field; then the Train tab's "base rounding": gptq on a float base
    is the config's one-line refusal (launch off); on nf4 it is valid and the TOML says so,
    its calibration left to the run's data."""
    from textual.widgets import TabbedContent

    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        launch = app.screen.query_one("#launch", Button)
        assert "config valid" in status(app) and not launch.disabled
        assert "gemma route" in status(app)  # which route trains it (model.backend)

        await set_field(pilot, app, "#f-mesh-tensor", "3")  # 1×1×3 on 8 devices
        assert launch.disabled
        assert "= 3, but there are 8 devices" in status(app)
        await set_field(pilot, app, "#f-mesh-tensor", "4")
        await set_field(pilot, app, "#f-mesh-data", "2")  # 2×1×4 = 8
        assert not launch.disabled, status(app)

        await set_field(pilot, app, "#f-train-batch_size", "3")  # the engine's mesh check
        assert launch.disabled and "mesh: batch_size is not divisible" in status(app)
        await set_field(pilot, app, "#f-train-batch_size", "8")
        assert not launch.disabled, status(app)

        quantize = app.screen.query_one("#f-model-quantize", Select)
        quantize.value = "gguf"  # a problem of another key than the mesh's says its own
        await settle(pilot)
        assert launch.disabled and status(app).startswith("✗ [model] quantize: "), status(app)
        assert "needs a GGUF base" in status(app) and "mesh" not in status(app)
        quantize.value = "none"
        await settle(pilot)
        assert not launch.disabled, status(app)

        await set_field(pilot, app, "#lora-rank", "0")
        assert launch.disabled and "lora.rank is 0" in status(app)
        await set_field(pilot, app, "#lora-rank", "8")

        await set_field(pilot, app, "#f-train-steps", "")
        assert launch.disabled and "train.steps is empty" in status(app)
        await pilot.press("ctrl+l")  # launching anyway only explains
        await settle(pilot)
        assert app.current_mode == "configure"
        await set_field(pilot, app, "#f-train-steps", "20")
        assert not launch.disabled
        assert "steps = 20" in str(app.screen.query_one("#toml-preview", Static).render())

        # the Train tab's "base rounding": gptq needs a quantized base
        app.screen.query_one(TabbedContent).active = "tab-train"
        await settle(pilot)
        app.screen.query_one("#f-model-quantize_method", Select).value = "gptq"
        await settle(pilot)
        assert launch.disabled and 'quantize_method = "gptq" with quantize = \'none\'' in status(app)
        app.screen.query_one("#f-model-quantize", Select).value = "nf4"
        await settle(pilot)
        assert not launch.disabled, status(app)
        toml = str(app.screen.query_one("#toml-preview", Static).render())
        assert 'quantize_method = "gptq"' in toml and 'quantize = "nf4"' in toml
        assert 'quantize_calibration = ""' in toml


async def test_mesh_picture_follows_the_fields_and_data_check_shows_a_preview():
    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await set_field(pilot, app, "#f-mesh-tensor", "2")
        await set_field(pilot, app, "#f-mesh-fsdp", "4")
        grid = str(app.screen.query_one("#device-grid").render())
        assert "1×4×2" in grid and "heads/2 (tensor)" in grid and "embed/4 (fsdp)" in grid
        await set_field(pilot, app, "#f-mesh-devices", "4")
        await set_field(pilot, app, "#f-mesh-fsdp", "-1")  # fills 4 devices: 1×2×2
        assert "1×2×2" in str(app.screen.query_one("#device-grid").render())
        await pilot.press("ctrl+d")
        await settle(pilot)
        report = str(app.screen.query_one("#data-report", Static).render())
        assert "data looks good" in report and "examples 480" in report
        assert "<start_of_turn>model⏎ 5" in report


async def test_theme_switch_is_remembered():
    app = WorkbenchApp(StaticClient(), theme="workbench-dark")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+t")
        assert app.theme == "workbench-light"
    assert load_settings().theme == "workbench-light"
    again = WorkbenchApp(StaticClient())
    async with again.run_test(size=SIZE):
        assert again.theme == "workbench-light"


async def test_every_binding_is_offered_by_the_command_palette():
    app = WorkbenchApp(StaticClient(), mode="runs", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for b in app.BINDINGS + app.screen.BINDINGS:
            assert b.id and b.description in titles, b
        await pilot.press("question_mark")
        assert app.current_mode == "help"
        keys = str(app.screen.query_one("#help-keys", Static).render())
        assert "runs.sweep" in keys and "configure.launch" in keys


async def test_compare_streams_both_sides_and_keeps_the_prompt_history():
    app = WorkbenchApp(StaticClient(), mode="compare", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.click("#compare-prompt")
        await pilot.press(*"add 2 and 3", "enter")
        await settle(pilot)
        assert str(app.screen.query_one("#out-tuned", Static).render()) == "The answer is 5."
        assert str(app.screen.query_one("#out-base", Static).render()) == "the answer is 5."
        app.screen.query_one("#compare-prompt", Input).value = ""
        await pilot.press("up")
        assert app.screen.query_one("#compare-prompt", Input).value == "add 2 and 3"


async def test_the_experts_target_is_offered_only_for_an_expert_bank():
    """Configure shows ``experts`` when the model's family counts adapters on an expert bank
    (``lora_per_rank``); hidden, it is no target."""
    from textual.app import App
    from textual.widgets import Checkbox

    from adapters_lib.config import LoraSpec
    from workbench.widgets.lora_form import LoraForm

    class Host(App):
        def compose(self):
            yield LoraForm(LoraSpec())

    app = Host()
    async with app.run_test(size=SIZE) as pilot:
        form = app.query_one(LoraForm)
        box = form.query_one("#lora-t-experts", Checkbox)
        assert not box.display and "experts" not in form.values()["targets"]
        form.offer_experts(True)
        box.value = True
        await pilot.pause()
        assert box.display and "experts" in form.values()["targets"]
        form.offer_experts(False)
        await pilot.pause()
        assert not box.display and "experts" not in form.values()["targets"]
