"""Snapshots of every screen at 80×24 and 120×40 in both themes (pytest-textual-snapshot).

The app runs against ``EngineFake``: replies recorded from the real engine
(``tests/recorded/engine_replies.json``: two finished 40-step demo runs, 8 CPU devices, the
catalog, a data report, estimates, a compare), with the focus taken off text fields (no
cursor blink) and every worker finished before the picture, so the snapshots are the same on
every machine. Update with ``--snapshot-update`` after looking; after a new recording, read
the text of every changed SVG before updating.

Each screen and size starts one app for its two pictures: the dark test's app starts light,
its picture is kept for the light test, then the theme switches (``both_themes``).
"""

from __future__ import annotations

import time

import pytest
from engine_fake import EngineFake
from engine_scenario import PROMPT
from fixtures_tui import settle as app_quiet
from pytest_textual_snapshot import SVGImageExtension
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
    await app_quiet(pilot)  # Configure: until the form re-validated (0.3 s after a change)
    name = app.screen.name
    if name == "runs":  # two runs marked: their curves overlaid, their configs diffed
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


KEPT: dict[tuple[str, tuple[int, int]], str] = {}
"""The light picture of each screen and size, taken in its dark test's app (see below)."""


async def picture(pilot) -> str:
    """The screenshot as ``snap_compare`` takes it (``textual._doc.take_svg_screenshot``:
    its pauses and animation waits after ``run_before``, then ``export_screenshot``)."""
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    return pilot.app.export_screenshot(title=pilot.app.title, simplify=True)


def both_themes(screen: str, size: tuple[int, int]):
    """``run_before`` of a dark test: the app, started in the light theme, settles; its light
    picture is kept for the light test; then the theme switches to dark (as ``ctrl+t`` does,
    ``App.theme``) and the dark picture is the test's own. One app start for two pictures:
    starting the app (composing and styling a screen) is most of a snapshot's CPU time, and
    a switch re-styles the same screen (0.05-0.4 s against 0.2-1.1 s). Both pictures are
    byte for byte those of an app started in its theme (checked for every screen and size
    in both directions when this was written)."""

    async def run_before(pilot) -> None:
        await settle(pilot)
        KEPT[screen, size] = await picture(pilot)
        pilot.app.theme = "workbench-dark"
        redraw = getattr(pilot.app.screen, "redraw", None)
        if redraw is not None:  # the plots draw with the theme's colours
            redraw()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", SCREENS)
def test_screen_snapshot(snap_compare, snapshot, screen, size, theme):
    assert THEMES == ("workbench-dark", "workbench-light")  # the dark test runs first
    if theme == "workbench-light" and (screen, size) in KEPT:  # its dark test's app took it
        assert snapshot.use_extension(SVGImageExtension) == KEPT.pop((screen, size))
        return
    fake = EngineFake()
    first = fake.data["created"][0]["id"]  # the rank-8 run the recording sampled and compared
    pair = theme == "workbench-dark"  # the light test alone (-k): an app of its own
    app = WorkbenchApp(fake, theme="workbench-light" if pair else theme, mode=screen,
                       remember=False, run_id=first if screen in ("train", "compare") else None)
    assert snap_compare(app, terminal_size=size,
                        run_before=both_themes(screen, size) if pair else settle)
