"""Focus and keys as a person meets them (Pilot, 80×24, the static engine stand-in).

Arriving on a screen puts the focus where the user acts (the prompt on Compare, the page
tabs on Configure, the table on Models and Runs); while a text field has the focus every
printable key goes into it, screen and app keys included; escape leaves the field and the
footer says so.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from fixtures_tui import StaticClient, settle, until
from textual.widgets import DataTable, Footer, Input, Select, Static, Tabs

from adapters_lib.engine import api
from workbench.app import WorkbenchApp

SIZE = (80, 24)
RUN = "20260101-120000-demo"
pytestmark = pytest.mark.anyio


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


async def test_configure_starts_on_the_page_tabs_escape_goes_back_and_ctrl_d_works_in_a_field():
    """Configure's keys in one app (one start of the form, ~0.6 s of CPU each): it starts on
    the page tabs and escape goes back to them (docs/tui.md, step 2, literally); then the
    check-data key works from inside a field (a field's own ctrl+d, delete right, must not
    eat it)."""
    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.focused, Tabs)
        await pilot.press("tab")
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

        # the check-data key from inside a field
        await pilot.press("escape")
        assert isinstance(app.focused, Tabs)
        assert "data looks good" not in str(app.screen.query_one("#data-report", Static).render())
        await pilot.press("enter")  # into the page's first field
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


class TalkingClient(StaticClient):
    """The static stand-in, remembering each compare request; ``hold`` keeps a stream open
    after its first token (until cancelled) to see escape cancel it."""

    def __init__(self, run_dir: str = "", best: int | None = None, hold: bool = False) -> None:
        self.requests: list[dict] = []
        self.run_dir, self.best, self.hold = run_dir, best, hold
        self.hung_up = threading.Event()

    def _summary(self, rid: str) -> dict:
        return {**super()._summary(rid), "dir": self.run_dir or f"/runs/{rid}",
                **({"best_step": self.best} if self.best is not None else {})}

    def stream(self, cmd: api.Command):
        return self.talk(cmd) if isinstance(cmd, api.Compare) else super().stream(cmd)

    def talk(self, cmd: api.Compare):
        messages = [{k: v for k, v in m.to_json().items() if v is not None} for m in cmd.messages]
        self.requests.append({"prompt": cmd.prompt, "run_id": cmd.run_id, "save": cmd.save,
                              **({"messages": messages} if messages else {})})
        turn = max(0, sum(1 for m in cmd.messages if m.role == "user") - 1)
        try:
            yield api.stream_item("token", {"side": "base", "text": f"b{turn}", "token": 7}, cmd.items)
            yield api.stream_item("token", {"side": "tuned", "text": f"t{turn}", "token": 7}, cmd.items)
            until = time.monotonic() + 30  # a failing test still ends
            while self.hold and time.monotonic() < until:
                time.sleep(0.05)
            yield api.stream_item("done", {"base": f"b{turn}", "tuned": f"t{turn}",
                                           "tokens": {"base": 1, "tuned": 1},
                                           "stop_reason": {"base": "stop", "tuned": "length"},
                                           "dtype": {"base": "bfloat16", "tuned": "bfloat16"},
                                           "quantize": {"base": "int8", "tuned": "int8"},
                                           "saved": f"{self.run_dir or '/runs/x'}/compare/1.jsonl"},
                                  cmd.items)
        finally:
            self.hung_up.set()


async def test_compare_multi_turn_sends_the_history_and_shows_every_turn():
    client = TalkingClient()
    app = WorkbenchApp(client, mode="compare", run_id=RUN, remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(*"Is 17 even or odd?", "enter")
        await settle(pilot)
        assert client.requests[-1]["prompt"] == "Is 17 even or odd?"
        assert client.requests[-1]["save"] is True  # every compare is kept beside the run
        assert "stop: end of turn" in app.screen.query_one("#pane-base").border_subtitle
        assert "stop: max new tokens" in app.screen.query_one("#pane-tuned").border_subtitle
        # what each side ran on stays in its title after the saved compare reloads the run's list
        assert app.screen.query_one("#pane-tuned").border_title.endswith("· bf16 · int8")

        await pilot.press("ctrl+n")  # a conversation: each prompt is the next turn
        prompt = app.screen.query_one("#compare-prompt", Input)
        assert "turn 1" in str(prompt.border_title)
        await pilot.press("ctrl+u", *"Is 17 even or odd?", "enter")
        await settle(pilot)
        assert prompt.value == "" and "turn 2" in str(prompt.border_title)
        await pilot.press(*"And 18?", "enter")
        await settle(pilot)
        sent = client.requests[-1]
        assert sent["prompt"] == ""
        assert sent["messages"] == [
            {"role": "user", "content": "Is 17 even or odd?"},
            {"role": "assistant", "base": "b0", "tuned": "t0"},
            {"role": "user", "content": "And 18?"}]
        tuned = str(app.screen.query_one("#out-tuned", Static).render())
        assert tuned == "› Is 17 even or odd?\nt0\n\n› And 18?\nt1"
        await pilot.press("ctrl+n")  # ends it: the next prompt stands alone
        await pilot.press("ctrl+u", *"Is 19 odd?", "enter")
        await settle(pilot)
        assert client.requests[-1]["prompt"] == "Is 19 odd?"
        assert "messages" not in client.requests[-1]


async def test_escape_cancels_a_running_compare_and_hangs_up():
    client = TalkingClient(hold=True)
    app = WorkbenchApp(client, mode="compare", run_id=RUN, remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(*"Is 17 even or odd?", "enter")
        for _ in range(100):
            await pilot.pause(0.05)
            if "t0" in str(app.screen.query_one("#out-tuned", Static).render()):
                break
        assert app.screen.generating and "escape" in footer_keys(app)  # "esc Cancel"
        await pilot.press("escape")
        assert not app.screen.generating
        assert app.focused is app.screen.query_one("#compare-prompt", Input)  # still typing
        client.hold = False
        assert await asyncio.to_thread(client.hung_up.wait, 20)
        await settle(pilot)
        assert app.screen.summary is None  # the cancelled stream's end is not shown
        await pilot.press("escape")  # nothing runs: escape leaves the field again
        assert app.focused is None


async def test_compare_picker_marks_the_best_step_and_lists_earlier_compares(tmp_path):
    folder = tmp_path / "compare"
    folder.mkdir()
    (folder / "20260101-120000.jsonl").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "Is 17 odd?"},
                      {"role": "user", "content": "And 18?"}],
         "base": ["no", "yes"], "tuned": ["odd", "even"], "step": 20}) + "\n", encoding="utf-8")
    app = WorkbenchApp(TalkingClient(str(tmp_path), best=20), mode="compare", run_id=RUN,
                       remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        picker = app.screen.query_one("#compare-step", Select)
        labels = [str(label) for label, _ in picker._options]
        assert labels == ["latest (40)", "step 40", "step 20 ★ best"]
        assert str(picker.query_one("SelectCurrent #label").render()) == "latest (40)"
        assert "escape, then [ and ] walk" in str(
            app.screen.query_one("#compare-wait", Static).render())
        assert "1 earlier compare" in str(app.screen.query_one("#compare-wait", Static).render())
        await pilot.press("escape", "left_square_bracket")
        assert str(app.screen.query_one("#out-tuned", Static).render()) == \
            "› Is 17 odd?\nodd\n\n› And 18?\neven"
        wait = str(app.screen.query_one("#compare-wait", Static).render())
        assert "step 20" in wait and "And 18? (turn 2)" in wait


async def test_quitting_while_the_engine_still_imports_gemma_does_not_wait_for_it():
    from engine_fake import EngineFake, load_recording

    recording = load_recording()
    recording.pop("status_later", None)  # the engine never gets past "importing gemma"
    fake = EngineFake(recording)
    stuck = threading.Event()
    status = fake.status

    def status_until_released(*, wait: bool = False):
        if stuck.is_set():  # a follower still polling after the test: end it, loudly
            raise RuntimeError("the engine follower outlived the app")
        return status(wait=wait)

    fake.status = status_until_released
    app = WorkbenchApp(fake, mode="help", remember=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            # the wait is on the nav strip (once the follower's first poll is in: under
            # load, mounting the app alone can take seconds)
            await until(pilot, lambda: "connecting" not in app.engine_note(), timeout=60,
                        what="the engine follower's first status")
            assert "importing gemma" in app.engine_note()
            await pilot.press("q")
        polls = len(fake.calls)
        await asyncio.sleep(1.0)  # the follower polls every 0.25 s while it runs
        assert len(fake.calls) == polls, "the engine follower kept polling after quit"
    finally:
        stuck.set()
