"""The TUI's main flows against a real engine on the demo model (Pilot).

Launch a run from Configure, watch the Train plot fill, stop it; compare base and tuned
side by side; overlay two runs on Runs and relaunch one with a new rank (rank sweep).
Runs are tiny (max_length 64, 1 device, a few steps).
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from pathlib import Path

import pytest
from fixtures_engine import demo_run_config
from fixtures_tui import until
from textual.widgets import Input, Static

from adapters_lib.config import config_from_dict
from workbench.app import WorkbenchApp
from workbench.screens.runs import RunsScreen
from workbench.widgets.plot import PlotView

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


@pytest.fixture(scope="module")
def finished_runs(engine):
    """Two short finished runs (rank 4 and rank 8), made through the API."""
    ids = []
    for rank in (4, 8):
        cfg = demo_run_config(steps=6, checkpoint_every=3)
        cfg["lora"]["rank"] = rank
        ids.append(engine.create_run(cfg).id)
    for rid in ids:
        assert engine.wait_run(rid, timeout=300).state == "completed"
    return ids


class LagProbe:
    """The longest gap between ticks of a 20 ms timer: how long the UI thread was blocked;
    and the longest garbage collection meanwhile, to tell a stall's cause."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.worst = 0.0
        self.worst_gc = 0.0
        self._gc_start = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        self.worst = max(self.worst, now - self.last)
        self.last = now

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
        else:
            self.worst_gc = max(self.worst_gc, time.monotonic() - self._gc_start)


@contextlib.contextmanager
def heap_of_the_app_alone(probe: LagProbe):
    """The TUI's own process holds no JAX, Keras or TensorFlow; this test's worker may, from
    the files it ran before (~860k objects: a full collection then takes 1-1.5 s on a loaded
    2-core machine, which CI measured as a 2.6 s "UI stall"). Objects made before the app
    are frozen out of the collector for the measurement, as if they were not there."""
    gc.collect()
    gc.freeze()
    gc.callbacks.append(probe.on_gc)
    try:
        yield
    finally:
        gc.callbacks.remove(probe.on_gc)
        gc.unfreeze()


async def test_launch_from_configure_fills_the_train_plot_and_stop_keeps_a_checkpoint(engine):
    defaults = config_from_dict(demo_run_config(steps=500, checkpoint_every=1000))
    app = WorkbenchApp(engine, mode="configure", defaults=defaults, remember=False)
    probe = LagProbe()
    with heap_of_the_app_alone(probe):
        await launch_watch_and_stop(app, probe)
    print(f"longest UI stall while metrics streamed in: {probe.worst * 1000:.0f} ms "
          f"(longest garbage collection: {probe.worst_gc * 1000:.0f} ms)")
    # generous for a loaded 2-core machine; a blocking engine call here would take seconds
    assert probe.worst < 1.0
    record = engine.get_run(app.current_run, metrics=True, events=False)
    assert record.state == "stopped" and record.checkpoints
    assert 5 <= len(record.metrics) < 500


async def launch_watch_and_stop(app: WorkbenchApp, probe: LagProbe) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.screen.device_count > 0, what="the engine's devices")
        await until(pilot, lambda: not app.screen.query_one("#launch").disabled, what="valid")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: app.current_mode == "train" and app.screen.query("#plot-loss"),
                    what="the Train screen")
        plot = app.screen.query_one("#plot-loss", PlotView)
        await pilot.pause(0.5)
        probe.last = time.monotonic()
        app.set_interval(0.02, probe.tick)  # from here on: metrics stream in, plots redraw
        await until(pilot, lambda: plot.point_count() >= 5, what="5 loss points")
        assert app.screen.view.state == "running"
        assert "running" in str(app.screen.query_one("#train-title", Static).render())
        await pilot.press("s")
        await until(pilot, lambda: app.screen.view.state == "stopped", what="stopped")


async def test_compare_streams_base_and_tuned_side_by_side(engine, finished_runs):
    app = WorkbenchApp(engine, mode="compare", run_id=finished_runs[0], remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.screen.view is not None, what="the run's checkpoints")
        app.screen.query_one("#compare-max-new-tokens", Input).value = "8"
        app.screen.query_one("#compare-prompt", Input).value = "Is 16 even or odd?"
        app.screen.query_one("#compare-prompt", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.summary is not None, what="the generation's end")
        tokens = app.screen.summary.tokens
        shown = {side: str(app.screen.query_one(f"#out-{side}", Static).render())
                 for side in ("base", "tuned")}
        saved = Path(app.screen.summary.saved)
        # the compare is kept beside the run, and the screen lists it among the earlier ones
        await until(pilot, lambda: any(e.get("when") == saved.stem for e in app.screen.earlier),
                    what="the compare among the earlier ones")
    assert tokens["base"] >= 1 and tokens["tuned"] >= 1
    assert all(shown.values())  # the text, or the note that the model said nothing
    [kept] = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert saved.parent.name == "compare" and kept["prompt"] == "Is 16 even or odd?"
    assert kept["tokens"] == tokens and kept["settings"]["max_new_tokens"] == 8
    assert kept["stop_reason"]["base"] in ("stop", "length")


async def test_runs_overlay_two_curves_and_rank_sweep_relaunches_on_top(engine, finished_runs):
    app = WorkbenchApp(engine, mode="runs", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        screen: RunsScreen = app.screen
        await until(pilot, lambda: set(finished_runs) <= {r.id for r in screen.runs})
        table = screen.query_one("#runs-table")
        for rid in finished_runs:
            table.move_cursor(row=[r.id for r in screen.runs].index(rid))
            await pilot.press("space")
        plot = screen.query_one("#runs-plot", PlotView)
        await until(pilot, lambda: len(plot.series) == 2, what="two overlaid curves")
        assert all(len(s.ys) == 6 for s in plot.series)
        assert "lora.rank: 4 | 8" in str(screen.query_one("#runs-diff-text", Static).render())

        table.move_cursor(row=[r.id for r in screen.runs].index(finished_runs[0]))
        before = {r.id for r in screen.runs}
        await pilot.press("w")
        await pilot.press("enter")  # the proposed rank: twice the parent's
        await until(pilot, lambda: len(screen.marked) == 2 and screen.marked[1] not in before,
                    what="the sweep run")
        child = screen.marked[1]
        assert screen.marked[0] == finished_runs[0]
        assert screen.configs.get(child, {}).get("lora", {}).get("rank") == 8 or \
            engine.get_run(child, metrics=False, events=False).config["lora"]["rank"] == 8
        await until(pilot, lambda: len(plot.series) == 2 and plot.series[1].ys,
                    what="the child's curve over its parent's")
    engine.wait_run(child, timeout=300)
