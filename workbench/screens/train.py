"""Train: live plots (loss + eval loss, LR or a DPO run's reward accuracy, grad-norm, tokens/s), progress with ETA, events, stop.

Attaching to a run = one ``get_run`` (everything so far) + ``stream_run(since_step=last)``
(what comes next), in a thread worker that posts each answer as a typed message
(``workbench.messages``); the screen folds them into a ``RunView`` on the UI thread, and a
2 Hz timer redraws the plots only when something changed. A run reattached
after the TUI was closed is shown exactly the same way. With no run chosen, the screen
attaches to the newest active run (else the newest run).

The header tells the run's state, step, last loss and last eval loss, the step time and the
ETA; under it, device memory in use against capacity (the engine's status, every
``MEMORY_S`` while the screen shows) and the checkpoints as they are written. Until the
first step the header says what the run waits for (set-up, compile) and for how long.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.widgets import Footer, ProgressBar, RichLog, Static
from textual.worker import get_current_worker

from adapters_lib.engine import api
from adapters_lib.runs.registry import short_id
from adapters_lib.runs.state import RunState
from workbench.messages import EngineStatusRead, RunChosen, RunRecord, RunStatusRead, RunStreamed
from workbench.screens.base import WorkbenchScreen
from workbench.screens.runstate import RunView, event_line
from workbench.screens.train_text import checkpoints_text, compiling_text, header_text, memory_text
from workbench.widgets.nav import NavBar
from workbench.widgets.plot import PlotView, Series

REDRAW_S = 0.5
MEMORY_S = 2.0
PLOTS = (("plot-loss", "loss"), ("plot-lr", "learning rate"), ("plot-grad", "grad norm"),
         ("plot-tps", "tokens/s"))


def newest_run(runs: list[api.RunSummary]) -> str | None:
    """The newest active run, else the newest run (ids sort by creation time)."""
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: r.id)
    return ([r for r in ordered if r.active] or ordered)[-1].id


class TrainScreen(WorkbenchScreen):
    BINDINGS = [
        Binding("s", "stop", "Stop run", id="train.stop"),
        Binding("c", "compare", "Compare", id="train.compare"),
        Binding("l", "toggle_log", "Log", id="train.log"),
    ]

    def __init__(self) -> None:
        super().__init__(name="train")
        self.view: RunView | None = None
        self._dirty = False
        self._memory_dirty = False
        self._shown_events = 0
        self.status: api.EngineStatus | None = None
        """The engine's last status reply (device memory)."""

    def compose(self) -> ComposeResult:
        yield NavBar("train")
        with Horizontal(id="train-head"):
            yield Static("no run yet — launch one from Configure (2)", id="train-title")
            yield ProgressBar(id="train-progress", show_eta=False)
        with Horizontal(id="train-info"):
            yield Static("", id="train-memory")
            yield Static("", id="train-ckpts")
        with Grid(id="train-plots"):
            for pid, title in PLOTS:
                yield PlotView(title, id=pid)
        yield RichLog(id="train-log", wrap=False, markup=False, max_lines=500)
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(REDRAW_S, self.redraw)
        self.set_interval(1.0, self.tick_wait)
        self.set_interval(MEMORY_S, self.tick_memory)

    def tick_wait(self) -> None:
        """While the run waits for its first step, the header's elapsed time must move."""
        if self.view is not None and self.view.active and (not self.view.metrics
                                                           or self.view.compiling() is not None):
            self._dirty = True

    def on_screen_resume(self) -> None:
        """Shown (the first time too): follow the current run, else find the newest; read
        the device memory while the screen shows."""
        run_id = getattr(self.app, "current_run", None)
        if run_id and (self.view is None or self.view.run_id != run_id):
            self.attach(run_id)
        elif self.view is None:
            self.find_run()
        self.read_memory()

    def tick_memory(self) -> None:
        """Every ``MEMORY_S`` while the screen shows: read the engine's memory (the engine's,
        not the run's: it moves whatever the run's state, so the reading never stops)."""
        if self.is_current:
            self.read_memory()

    @work(thread=True, exclusive=True, group="train-memory")
    def read_memory(self) -> None:
        try:
            status = self.client.status()
        except Exception:  # noqa: BLE001 - the nav strip says when the engine is gone
            return
        self.post_message(EngineStatusRead(status))

    def on_engine_status_read(self, message: EngineStatusRead) -> None:
        self.status = message.status
        self._memory_dirty = True

    @work(thread=True, exclusive=True, group="train-find")
    def find_run(self) -> None:
        run_id = newest_run(self.engine(self.client.list_runs) or [])
        if run_id:
            self.post_message(RunChosen(run_id))

    def on_run_chosen(self, message: RunChosen) -> None:
        if self.view is None:
            self.attach(message.run_id)

    # ------------------------------------------------------------------ attach + stream

    def attach(self, run_id: str) -> None:
        self.app.current_run = run_id  # type: ignore[attr-defined]
        self.view = RunView(run_id)
        self._dirty = True
        self._shown_events = 0
        self.query_one(RichLog).clear()
        self.follow(run_id)

    @work(thread=True, exclusive=True, group="train-stream")
    def follow(self, run_id: str) -> None:
        """(Thread worker) the run's record, then its stream until it ends, each posted to the
        screen as it comes (``RunRecord``, ``RunStreamed``); nothing else is touched here."""
        worker = get_current_worker()
        record = self.engine(self.client.get_run, run_id)
        if record is None or worker.is_cancelled:
            return
        self.post_message(RunRecord(run_id, record))
        since = max((int(m.get("step", 0) or 0) for m in record.metrics or []), default=0)
        try:
            for item in self.client.stream_run(run_id, since_step=since):
                if worker.is_cancelled:
                    return
                self.post_message(RunStreamed(run_id, item))
                if item.type == "end":
                    break
        except Exception as err:  # noqa: BLE001 - the stream ended badly: say so, keep the plot
            if not worker.is_cancelled:
                self.ui(self.notify, f"stream ended: {err}", severity="warning")
        final = self.engine(self.client.get_run, run_id, metrics=False, events=False)
        if final is not None and not worker.is_cancelled:
            self.post_message(RunRecord(run_id, final))

    def following(self, run_id: str) -> RunView | None:
        """The view of ``run_id`` if it is still the one shown (an answer for another is dropped)."""
        return self.view if self.view is not None and self.view.run_id == run_id else None

    def on_run_record(self, message: RunRecord) -> None:
        view = self.following(message.run_id)
        if view is not None:
            view.apply_record(message.record)
            self._dirty = True

    def on_run_streamed(self, message: RunStreamed) -> None:
        view = self.following(message.run_id)
        if view is not None:
            view.apply_stream(message.item)
            self._dirty = True

    def on_run_status_read(self, message: RunStatusRead) -> None:
        view = self.following(message.run_id)
        if view is not None:
            view.apply_status(message.status)
            self._dirty = True

    # ------------------------------------------------------------------ drawing (≤ 2 Hz)

    def redraw(self) -> None:
        if self._memory_dirty:  # the memory line alone: no plot is redrawn for it
            self._memory_dirty = False
            self.query_one("#train-memory", Static).update(memory_text(self.status))
        if not self._dirty or self.view is None:
            return
        self._dirty = False
        v = self.view
        loss, eval_loss = v.series("loss"), v.series("eval_loss")
        lr, grad, tps = v.series("lr"), v.series("grad_norm"), v.speed_series()
        reward, eval_reward = v.series("reward_accuracy"), v.series("eval_reward_accuracy")
        new_events = v.events[self._shown_events:]
        self._shown_events = len(v.events)
        step, total = v.step, v.total_steps
        head = header_text(v, short_id(v.run_id), state_style(v.state))
        ckpts = checkpoints_text(v.checkpoints)
        memory = memory_text(self.status)
        self.query_one("#plot-loss", PlotView).set_series(
            [Series("train", *loss)]
            + ([Series("eval", *eval_loss, marker="◆", lines=False)] if eval_loss[0] else []))
        rates = self.query_one("#plot-lr", PlotView)
        if reward[0]:  # a DPO run: its reward accuracy where the learning rate was
            rates.title = "reward accuracy"
            rates.set_series([Series("train", *reward)]
                             + ([Series("eval", *eval_reward, marker="◆", lines=False)] if eval_reward[0] else []))
        else:
            rates.title = "learning rate"
            rates.set_series([Series("lr", *lr)])
        self.query_one("#plot-grad", PlotView).set_series([Series("grad norm", *grad)])
        speed = self.query_one("#plot-tps", PlotView)
        compiling = v.compiling()
        speed.title = f"tokens/s · {compiling_text(compiling)}" if compiling else "tokens/s"
        speed.set_series([Series("tok/s", *tps)])
        self.query_one("#train-title", Static).update(head)
        self.query_one("#train-memory", Static).update(memory)
        self.query_one("#train-ckpts", Static).update(ckpts)
        bar = self.query_one(ProgressBar)
        bar.update(total=total or None, progress=step)
        log = self.query_one(RichLog)
        for e in new_events:
            log.write(event_line(e))

    # ------------------------------------------------------------------ actions

    def action_stop(self) -> None:
        if self.view is None:
            self.notify("no run to stop", severity="warning")
            return
        if not self.view.active:
            self.notify(f"run is {self.view.state}", severity="warning")
            return
        self.notify(f"stopping {self.view.run_id} (checkpoint first)…", timeout=3)
        self.stop(self.view.run_id)

    @work(thread=True, group="train-stop")
    def stop(self, run_id: str) -> None:
        result = self.engine(self.client.stop_run, run_id)
        if result is not None:
            self.post_message(RunStatusRead(run_id, result))

    def action_compare(self) -> None:
        if self.view is not None:
            self.app.open_run(self.view.run_id, "compare")  # type: ignore[attr-defined]
        else:
            self.app.action_show("compare")  # type: ignore[attr-defined]

    def action_toggle_log(self) -> None:
        self.query_one(RichLog).toggle_class("hidden")


def state_style(state: RunState | None) -> str:
    return {RunState.RUNNING: "green", RunState.COMPLETED: "b green", RunState.FAILED: "b red",
            RunState.INTERRUPTED: "yellow", RunState.STOPPED: "yellow",
            RunState.STOPPING: "yellow"}.get(state, "dim")


SCREEN = TrainScreen
