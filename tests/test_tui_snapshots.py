"""Snapshots of every screen at 80×24 and 120×40 in both themes (pytest-textual-snapshot).

The app runs against ``EngineFake``: replies recorded from the real engine
(``tests/recorded/engine_replies.json``: two finished 40-step demo runs, 8 CPU devices, the
catalog, a data report, estimates, a compare), with the focus taken off text fields (no
cursor blink) and every worker finished before the picture, so the snapshots are the same on
every machine. Update with ``--snapshot-update`` after looking; after a new recording, read
the text of every changed SVG before updating.
"""

from __future__ import annotations

import time

import pytest
from engine_fake import EngineFake
from engine_scenario import PROMPT
from textual.worker import WorkerCancelled

from workbench.app import WorkbenchApp
from workbench.widgets.nav import NavBar

SCREENS = ("models", "configure", "train", "compare", "runs", "help")
SIZES = ((80, 24), (120, 40))
THEMES = ("workbench-dark", "workbench-light")


async def workers_done(pilot) -> None:
    try:
        await pilot.app.workers.wait_for_complete()
    except WorkerCancelled:  # an exclusive worker replaced by a newer one
        pass
    await pilot.pause()


@pytest.fixture(autouse=True)
def utc_clock(monkeypatch):
    """Recorded event times are epoch seconds, shown in local time: the same clock
    everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def engine_followed(pilot, timeout: float = 30.0) -> None:
    """Until the app has seen the engine ready: the fake's first status is the recorded
    start-up one (gemma still importing), the next (0.25 s later) the ready one."""
    app = pilot.app
    for _ in range(int(timeout / 0.05)):
        if app.engine_phase.wait is None:
            for nav in app.screen.query(NavBar):  # it shows the phase at its next tick (0.25 s):
                nav.tick()  # on a loaded machine the shot came first ("engine connecting 1.5s")
            return
        await pilot.pause(0.05)
    raise AssertionError(f"the engine phase never left its wait: {app.engine_note()}")


async def settle(pilot) -> None:
    app = pilot.app
    await engine_followed(pilot)
    await workers_done(pilot)
    name = app.screen.name
    if name == "configure":
        await pilot.pause(0.35)  # the form re-validates 0.3 s after a change
        await workers_done(pilot)
    elif name == "runs":  # two runs marked: their curves overlaid, their configs diffed
        await pilot.press("space", "down", "space")
        await workers_done(pilot)
    elif name == "compare":  # the recorded prompt sent: both panes filled
        app.screen.query_one("#compare-prompt").value = PROMPT
        app.screen.action_send()
        await workers_done(pilot)
    redraw = getattr(app.screen, "redraw", None)
    if redraw is not None:
        redraw()
    app.screen.set_focus(None)
    await pilot.pause()


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", SCREENS)
def test_screen_snapshot(snap_compare, screen, size, theme):
    fake = EngineFake()
    first = fake.data["created"][0]["id"]  # the rank-8 run the recording sampled and compared
    app = WorkbenchApp(fake, theme=theme, mode=screen, remember=False,
                       run_id=first if screen in ("train", "compare") else None)
    assert snap_compare(app, terminal_size=size, run_before=settle)
