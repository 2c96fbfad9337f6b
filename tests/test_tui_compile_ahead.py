"""The TUI says what it waits for: Configure's readiness line as the engine compiles the
config's programs ahead (a real engine, compiling ahead on the CPU as it would on a chip:
``GEMMA_WORKBENCH_COMPILE_AHEAD=on``); the Train screen's "compiling the train step (n s)"
instead of a speed, with the compile step left out of the step-time figures."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from fixtures_engine import demo_run_config
from fixtures_tui import StaticClient, until
from textual.widgets import Input, Static

from adapters_lib.config import config_from_dict
from adapters_lib.engine import api
from workbench.app import WorkbenchApp
from workbench.screens.runstate import RunView
from workbench.screens.train_text import header_text
from workbench.widgets.plot import PlotView
from workbench.widgets.readiness import readiness_text

pytestmark = pytest.mark.anyio
RUN = "20260101-150000-demo-compiling"


class CompilingRun(StaticClient):
    """A run at step 3 whose train step compiles in the foreground now (a batch no compiled
    program covers), 12 s so far; step 2 compiled for 40 s before."""

    def __init__(self) -> None:
        self.started = time.time() - 12

    def _summary(self, rid: str) -> dict[str, Any]:
        return {"id": rid, "dir": f"/runs/{rid}", "state": "running", "step": 2, "total_steps": 40}

    def _record(self, rid: str, metrics: bool = True, events: bool = True) -> dict[str, Any]:
        rows = [{"step": 1, "loss": 3.0, "tokens_per_s": 900.0, "step_time_s": 0.4},
                {"step": 2, "loss": 2.9, "tokens_per_s": 9.0, "step_time_s": 40.4, "compile_s": 40.0}]
        return {**self._summary(rid), "config": demo_run_config(steps=40), "checkpoints": [],
                "metrics": rows if metrics else None,
                "events": [{"time": self.started - 60, "kind": "state", "state": "running"},
                           {"time": self.started - 41, "kind": "compile", "program": "train step",
                            "state": "compiling", "seconds": 0.0},
                           {"time": self.started - 1, "kind": "compile", "program": "train step",
                            "state": "ready", "seconds": 40.0},
                           {"time": self.started, "kind": "compile", "program": "train step",
                            "state": "compiling", "seconds": 0.0}] if events else None}

    def stream(self, cmd: api.Command):
        return iter([api.stream_item("replayed", {}, cmd.items)])


async def test_train_says_it_compiles_the_train_step_instead_of_a_speed():
    client = CompilingRun()
    app = WorkbenchApp(client, mode="train", run_id=RUN, remember=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.screen.view is not None and len(app.screen.view.metrics) == 2,
                    what="the run's record")
        app.screen.redraw()
        title = str(app.screen.query_one("#train-title", Static).render())
        shown = re.search(r"compiling the train step \((\d+) s\)", title)
        # the seconds since the compile began: 12 when the screen drew at once (more on a busy machine)
        assert shown and 12 <= int(shown[1]) <= time.time() - client.started + 1, title
        assert "/step" not in title and "ETA" not in title  # no speed while it compiles
        speed = app.screen.query_one("#plot-tps", PlotView)
        assert speed.title.startswith("tokens/s · compiling the train step (")
        assert app.screen.view.speed_series() == ((1,), (900.0,))  # the compile step left out


def test_the_header_goes_back_to_the_step_time_once_the_compile_is_ready():
    view = RunView(RUN)
    view.apply_record(api.RunDetail.from_json(CompilingRun()._record(RUN)))
    view.apply_event({"time": time.time(), "kind": "compile", "program": "train step", "state": "ready",
                      "seconds": 13.0})
    for step in range(3, 6):
        view.add_metrics({"step": step, "loss": 2.5, "tokens_per_s": 950.0, "step_time_s": 0.5})
    head = header_text(view, "demo", "green")
    assert "compiling" not in head and "0.50s/step" in head  # step 2's 40 s is not a step time
    assert view.step_time() == 0.5


def test_the_readiness_line_in_words():
    def jobs(state: str, *states: tuple[str, str, float | None]) -> api.CompileJobs:
        return api.CompileJobs.from_json({
            "ahead": True, "backend": "tpu", "latest": {"request": 7, "state": state, "about": "x"},
            "jobs": [{"id": i, "what": w, "state": s, "seconds": sec, "request": 7}
                     for i, (w, s, sec) in enumerate(states)]})

    line = readiness_text(jobs("planned", ("train step", "ready", 88.0), ("eval step", "compiling", 12.4),
                               ("eval step", "ready", 1.0)))
    assert "train step [green]ready" in line and "eval step [yellow]compiling (12 s)" in line
    assert "queued" in readiness_text(jobs("planned", ("train step", "queued", None)))
    assert "when the running run ends" in readiness_text(jobs("deferred"))
    cpu = api.CompileJobs(ahead=False, backend="cpu", message="the programs compile at launch (a CPU …)")
    assert readiness_text(cpu).startswith("[dim]the programs compile at launch")


@pytest.fixture(scope="module")
def compiling_engine(engine_factory):
    """An engine that compiles ahead on the CPU, as one does on an accelerator."""
    return engine_factory(env={"GEMMA_WORKBENCH_COMPILE_AHEAD": "on"}).client


async def test_configure_shows_each_program_compiling_then_ready_and_an_edit_asks_again(compiling_engine):
    cfg = demo_run_config(steps=3)
    app = WorkbenchApp(compiling_engine, mode="configure", defaults=config_from_dict(cfg), remember=False)
    seen: list[str] = []

    def line() -> str:
        text = str(app.screen.query_one("#ahead-status", Static).render())
        if not seen or seen[-1] != text:
            seen.append(text)
        return text

    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "train step ready" in line() and "eval step ready" in line(),
                    timeout=240, what=f"the programs ready ({seen})")
        assert any("setting up" in t or "queued" in t or "compiling" in t for t in seen), seen
        first = app.screen.ahead_jobs.latest.request
        app.screen.query_one("#lora-rank", Input).value = "8"  # Configure's edit
        await until(pilot, lambda: app.screen.ahead_jobs.latest.request > first, timeout=60,
                    what="a new compile-ahead after the edit")
        await until(pilot, lambda: "train step ready" in line(), timeout=240, what=f"ready again ({seen})")
        latest = app.screen.ahead_jobs.latest.request
    assert compiling_engine.compile_jobs().latest.request == latest
