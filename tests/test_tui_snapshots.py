"""Snapshots of every screen at 80×24 and 120×40 in both themes (pytest-textual-snapshot).

The app runs against ``StaticClient`` (a finished run, fixed metrics), with the focus taken
off text fields (no cursor blink) and every worker finished before the picture, so the
snapshots are the same on every machine. Update with ``--snapshot-update`` after looking.
"""

from __future__ import annotations

import pytest
from fixtures_tui import StaticClient
from textual.worker import WorkerCancelled

from workbench.app import WorkbenchApp

SCREENS = ("models", "configure", "train", "compare", "runs", "help")
SIZES = ((80, 24), (120, 40))
THEMES = ("workbench-dark", "workbench-light")


async def workers_done(pilot) -> None:
    try:
        await pilot.app.workers.wait_for_complete()
    except WorkerCancelled:  # an exclusive worker replaced by a newer one
        pass
    await pilot.pause()


async def settle(pilot) -> None:
    app = pilot.app
    await workers_done(pilot)
    name = app.screen.name
    if name == "configure":
        await pilot.pause(0.35)  # the form re-validates 0.3 s after a change
        await workers_done(pilot)
    elif name == "runs":  # two runs marked: their curves overlaid, their configs diffed
        await pilot.press("space", "down", "space")
        await workers_done(pilot)
    elif name == "compare":  # one prompt sent: both panes filled
        app.screen.query_one("#compare-prompt").value = "add 2 and 3"
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
    app = WorkbenchApp(StaticClient(), theme=theme, mode=screen, remember=False,
                       run_id="20260101-120000-demo" if screen in ("train", "compare") else None)
    assert snap_compare(app, terminal_size=size, run_before=settle)
