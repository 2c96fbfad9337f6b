"""Focus and keys as a person meets them (Pilot, 80×24, the static engine stand-in).

Arriving on a screen puts the focus where the user acts (the prompt on Compare, the first
field on Configure, the table on Models and Runs); while a text field has the focus every
printable key goes into it, screen and app keys included; escape leaves the field and the
footer says so.
"""

from __future__ import annotations

import pytest
from fixtures_tui import StaticClient
from textual.widgets import DataTable, Footer, Input, Static, Tabs

from workbench.app import WorkbenchApp

SIZE = (80, 24)
RUN = "20260101-120000-demo"
pytestmark = pytest.mark.anyio


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.4)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def footer_keys(app) -> list[str]:
    return [k.key for k in app.screen.query_one(Footer).query("FooterKey")]


async def test_compare_takes_what_you_type_and_enter_fills_both_panes():
    app = WorkbenchApp(StaticClient(), mode="compare", run_id=RUN, remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        prompt = app.screen.query_one("#compare-prompt", Input)
        assert app.focused is prompt
        assert "escape" in footer_keys(app)  # "esc Leave field"
        await pilot.press(*"Is 17 even or odd? 1 2 q s w ?")
        assert prompt.value == "Is 17 even or odd? 1 2 q s w ?"
        assert app.current_mode == "compare"
        await pilot.press("enter")
        await settle(pilot)
        assert app.current_mode == "compare"
        assert str(app.screen.query_one("#out-tuned", Static).render()) == "The answer is 5."
        assert str(app.screen.query_one("#out-base", Static).render()) == "the answer is 5."
        assert "4 tokens" in app.screen.query_one("#pane-tuned").border_subtitle
        same = str(app.screen.query_one("#compare-same", Static).render())
        assert "same seed, same settings" in same and "seed 0" in same

        await pilot.press("escape")
        assert app.focused is None and "escape" not in footer_keys(app)
        await pilot.press("enter")  # back into the prompt
        assert app.focused is prompt
        await pilot.press("escape", "1")  # outside a field the screen keys work again
        assert app.current_mode == "models"
        await pilot.press("4")
        await settle(pilot)
        assert app.focused is app.screen.query_one("#compare-prompt", Input)


async def test_configure_starts_in_the_first_field_and_escape_goes_to_the_page_tabs():
    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.focused is app.screen.query_one("#f-mesh-data", Input)
        await pilot.press("escape")
        assert isinstance(app.focused, Tabs)
        # docs/tui.md, step 2, literally: → → → opens Train, tab tab tab reaches steps
        await pilot.press("right", "right", "right", "tab", "tab", "tab")
        steps = app.screen.query_one("#f-train-steps", Input)
        assert app.focused is steps
        await pilot.press("ctrl+u", *"30", "enter")
        await settle(pilot)
        assert steps.value == "30" and app.current_mode == "configure"
        assert "steps = 30" in str(app.screen.query_one("#toml-preview", Static).render())


async def test_check_data_key_works_from_inside_a_field():
    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.focused, Input)
        await pilot.press("ctrl+d")  # a field's own ctrl+d (delete right) must not eat it
        await settle(pilot)
        assert "data looks good" in str(app.screen.query_one("#data-report", Static).render())


@pytest.mark.parametrize("mode, table", [("models", "#models-table"), ("runs", "#runs-table")])
async def test_tables_have_the_focus_on_arrival(mode, table):
    app = WorkbenchApp(StaticClient(), mode=mode, remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.focused is app.screen.query_one(table, DataTable)
        assert app.screen.query_one(table, DataTable).row_count >= 2
