"""Compare: one prompt, base and tuned model streaming side by side.

Pick the run and one of its checkpoints, set the decoding (temperature, max tokens, seed),
type a prompt and press enter (ctrl+r also sends: some terminals cannot send ctrl+enter).
Tokens arrive from ``client.compare(...)`` in a thread worker and are appended to the pane
of their side. Up/down in the prompt walk the prompt history (remembered in settings.toml).

Arriving here puts the focus in the prompt (digits and ``?`` go into it); ``escape`` leaves
it and ``enter`` comes back. A line over the prompt says that both sides get the same seed
and settings; each pane's frame says what that side made (tokens, tokens/s, why it stopped).
Earlier compares of the run (``<run>/compare/*.jsonl``) are listed under the panes: ``[`` and
``]`` walk them when the prompt does not have the focus.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, Label, Select, Static
from textual.worker import get_current_worker

from workbench.screens.base import WorkbenchScreen, error_text, is_text_field
from workbench.screens.compare_history import earlier_compares, side_stats
from workbench.screens.runstate import RunView
from workbench.widgets.lora_form import parse_number
from workbench.widgets.nav import NavBar
from workbench.widgets.waits import WaitNote

LATEST = -1


def token_side(ev: dict[str, Any]) -> tuple[str, str]:
    """(side, text) of one compare stream item; side is base, tuned, done or error."""
    kind = str(ev.get("type", ev.get("event", "")))
    if isinstance(ev.get("data"), dict):
        ev = {**ev["data"], "type": kind}
    if kind in ("done", "end"):
        return "done", ""
    if kind == "error" or "error" in ev and "side" not in ev:
        err = ev.get("error") or ev.get("message")
        return "error", err.get("message", str(err)) if isinstance(err, dict) else str(err)
    side = str(ev.get("side", ev.get("model", "")))
    text = ev.get("text", ev.get("token", ev.get("delta", "")))
    return side, str(text or "")


class CompareScreen(WorkbenchScreen):
    AUTO_FOCUS = "#compare-prompt"
    BINDINGS = [
        Binding("ctrl+r", "send", "Send", id="compare.send"),
        # priority: the prompt's own ctrl+x (cut) must not swallow it while tokens stream
        Binding("ctrl+x", "cancel", "Cancel", id="compare.cancel", priority=True),
        Binding("enter", "focus_prompt", "Type a prompt", id="compare.focus_prompt"),
        Binding("up", "history(1)", "Older prompt", id="compare.history_older", show=False),
        Binding("down", "history(-1)", "Newer prompt", id="compare.history_newer", show=False),
        Binding("left_square_bracket", "earlier(1)", "Earlier compare", key_display="[",
                id="compare.earlier"),
        Binding("right_square_bracket", "earlier(-1)", "Later compare", key_display="]",
                id="compare.later", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="compare")
        self.view: RunView | None = None
        self.history_pos = -1
        self.texts = {"base": "", "tuned": ""}
        self.summary: dict[str, Any] | None = None
        """The ``done`` item of the last generation (token counts, seconds), once it ends."""
        self.generating = False
        self.earlier: list[dict[str, Any]] = []
        """Earlier compares of the run, newest first; ``earlier_pos`` is the one shown."""
        self.earlier_pos = -1

    def compose(self) -> ComposeResult:
        yield NavBar("compare")
        with Horizontal(classes="row", id="compare-pickers"):
            yield Label("run", classes="label-short")
            yield Select([], prompt="choose a run", id="compare-run", compact=True)
            yield Label("ckpt", classes="label-short")
            yield Select([("latest", LATEST)], value=LATEST, allow_blank=False,
                         id="compare-step", compact=True)
        with Horizontal(classes="row", id="compare-decoding"):
            yield Label("temp", classes="label-short")
            yield Input("0", id="compare-temperature", type="number", classes="tiny", compact=True)
            yield Label("max tok", classes="label-short")
            yield Input("64", id="compare-max-tokens", type="integer", classes="tiny", compact=True)
            yield Label("seed", classes="label-short")
            yield Input("0", id="compare-seed", type="integer", classes="tiny", compact=True)
        yield Static("", id="compare-same", classes="note")
        yield Input(placeholder="type a prompt · enter sends · ↑/↓ history",
                    id="compare-prompt")
        with Horizontal(id="compare-panes"):
            with Vertical(classes="pane", id="pane-base"):
                with VerticalScroll():
                    yield Static("", id="out-base", classes="out")
            with Vertical(classes="pane", id="pane-tuned"):
                with VerticalScroll():
                    yield Static("", id="out-tuned", classes="out")
        yield WaitNote("", id="compare-wait")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#pane-base").border_title = "base"
        self.query_one("#pane-tuned").border_title = "tuned"
        self.show_same()

    @on(Input.Changed, "#compare-temperature, #compare-max-tokens, #compare-seed")
    def show_same(self) -> None:
        """The line that says both sides decode alike (what the A/B is fair about)."""
        temp = self.query_one("#compare-temperature", Input).value or "0"
        max_tokens = self.query_one("#compare-max-tokens", Input).value or "64"
        seed = self.query_one("#compare-seed", Input).value or "0"
        self.query_one("#compare-same", Static).update(
            f"same seed, same settings on both sides: seed {escape(seed)} · temperature "
            f"{escape(temp)} · max {escape(max_tokens)} tokens · chat template")

    def on_screen_resume(self) -> None:
        """Shown (the first time too): refresh the run list (and its checkpoints); the
        focus goes to the prompt unless another field has it."""
        self.load_runs()
        if not is_text_field(self.focused):
            self.action_focus_prompt()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.generating
        if action in ("history", "focus_prompt"):
            return self.focused is not self.query_one("#compare-prompt") if \
                action == "focus_prompt" else self.focused is self.query_one("#compare-prompt")
        if action == "earlier":
            return not is_text_field(self.focused) and bool(self.earlier)
        return super().check_action(action, parameters)

    def action_focus_prompt(self) -> None:
        self.query_one("#compare-prompt", Input).focus()

    def attach(self, run_id: str) -> None:
        self.app.current_run = run_id  # type: ignore[attr-defined]
        self.load_runs()

    @work(thread=True, exclusive=True, group="compare-runs")
    def load_runs(self) -> None:
        runs = self.engine(self.client.list_runs)
        if runs is not None:
            self.ui(self.show_runs, runs)

    def show_runs(self, runs: list[dict[str, Any]]) -> None:
        ids = sorted((str(r["id"]) for r in runs), reverse=True)
        picker = self.query_one("#compare-run", Select)
        current = getattr(self.app, "current_run", None)
        picker.set_options([(i, i) for i in ids])
        if current in ids:
            if picker.value == current:  # no Changed event: refresh its checkpoints here
                self.load_checkpoints(current)
            picker.value = current
        elif ids and picker.value is Select.NULL:
            picker.value = ids[0]

    @on(Select.Changed, "#compare-run")
    def _run_changed(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.app.current_run = str(event.value)  # type: ignore[attr-defined]
            self.load_checkpoints(str(event.value))

    @work(thread=True, exclusive=True, group="compare-ckpts")
    def load_checkpoints(self, run_id: str) -> None:
        record = self.engine(self.client.get_run, run_id)
        if record is None:
            return
        view = RunView(run_id)
        view.apply_record({k: v for k, v in record.items() if k not in ("metrics", "events")})
        self.ui(self.show_checkpoints, view, earlier_compares(record))

    def show_checkpoints(self, view: RunView, earlier: list[dict[str, Any]]) -> None:
        """Every checkpoint of the run in the picker (newest first); the choice is kept when
        the list grows."""
        same_run = self.view is not None and self.view.run_id == view.run_id
        self.view = view
        picker = self.query_one("#compare-step", Select)
        keep = picker.value if same_run and picker.value in view.checkpoints else LATEST
        latest = f"latest ({view.checkpoints[-1]})" if view.checkpoints else "latest"
        picker.set_options([(latest, LATEST)] + [(f"step {s}", s) for s in
                                                 reversed(view.checkpoints)])
        picker.value = keep
        self.query_one("#pane-tuned").border_title = f"tuned · {escape(view.run_id)}"
        model = (view.config.get("model") or {}).get("source", "")
        self.query_one("#pane-base").border_title = f"base · {escape(str(model))}" if model \
            else "base"
        self.earlier, self.earlier_pos = earlier, -1
        if not self.generating and self.summary is None:
            count = len(earlier)
            self.query_one("#compare-wait", WaitNote).done(
                f"[dim]{count} earlier compare{'s' if count != 1 else ''} of this run: "
                "escape, then [ and ] walk them[/]" if count else
                f"[dim]{len(view.checkpoints)} checkpoint(s) · the tuned side uses the one "
                "picked above[/]")

    # ------------------------------------------------------------------ sending

    @on(Input.Submitted, "#compare-prompt")
    def _submitted(self) -> None:
        self.action_send()

    def request(self) -> dict[str, Any] | None:
        run = self.query_one("#compare-run", Select).value
        prompt = self.query_one("#compare-prompt", Input).value.strip()
        if run is Select.NULL:
            self.notify("choose a run first (launch one from Configure)", severity="warning")
            return None
        if not prompt:
            self.notify("type a prompt first", severity="warning")
            return None
        temp = parse_number(self.query_one("#compare-temperature", Input).value or "0", float)
        max_tokens = parse_number(self.query_one("#compare-max-tokens", Input).value or "64", int)
        seed = parse_number(self.query_one("#compare-seed", Input).value or "0", int)
        bad = [name for name, v, ok in (("temperature", temp, isinstance(temp, float) and temp >= 0),
                                         ("max tokens", max_tokens,
                                          isinstance(max_tokens, int) and 0 < max_tokens <= 8192),
                                         ("seed", seed, isinstance(seed, int)))
               if not ok]
        if bad:
            self.notify(f"{', '.join(bad)}: not a valid value", severity="error")
            return None
        step = self.query_one("#compare-step", Select).value
        return {"prompt": prompt, "run_id": str(run), "step": int(step), "max_tokens": max_tokens,
                "temperature": temp, "seed": seed}

    def action_send(self) -> None:
        req = self.request()
        if req is None:
            return
        self.app.remember_prompt(req["prompt"])  # type: ignore[attr-defined]
        self.history_pos = -1
        self.texts = {"base": "", "tuned": ""}
        self.summary = None
        self.generating = True
        self.refresh_bindings()
        self.query_one("#out-base", Static).update("[dim]…[/]")
        self.query_one("#out-tuned", Static).update("[dim]…[/]")
        for side in ("base", "tuned"):
            self.query_one(f"#pane-{side}").border_subtitle = ""
        step = "the latest checkpoint" if req["step"] == LATEST else f"step {req['step']}"
        self.query_one("#compare-wait", WaitNote).start(
            f"loading {step} (restore + compile the first time), then generating",
            hint="ctrl+x cancels")
        self.stream(req)

    @work(thread=True, exclusive=True, group="compare-stream")
    def stream(self, req: dict[str, Any]) -> None:
        worker = get_current_worker()
        first = True
        try:
            for ev in self.client.compare(**req):
                if worker.is_cancelled:
                    return
                side, text = token_side(ev)
                if side == "done":
                    data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
                    self.ui(self.finish, data)
                    return
                if side == "error":
                    self.ui(self.failed, text)
                    return
                if side in self.texts and text:
                    if first:
                        first = False
                        self.ui(self.query_one("#compare-wait", WaitNote).start,
                                "generating", "ctrl+x cancels")
                    self.ui(self.append, side, text)
        except Exception as err:  # noqa: BLE001
            if not worker.is_cancelled:
                self.ui(self.failed, error_text(err))
            return
        if not worker.is_cancelled:
            self.ui(self.failed, "the engine closed the stream before the end")

    def failed(self, text: str) -> None:
        self.generating = False
        self.refresh_bindings()
        self.query_one("#compare-wait", WaitNote).done(f"[b red]✗[/] {escape(text)}")
        self.notify(text, title="compare", severity="error", timeout=8)

    def append(self, side: str, text: str) -> None:
        self.texts[side] += text
        self.query_one(f"#out-{side}", Static).update(escape(self.texts[side]))

    def finish(self, summary: dict[str, Any]) -> None:
        """Both sides are done: each pane's frame says what its side made and why it stopped
        (an empty answer says so)."""
        self.summary = summary
        self.generating = False
        self.refresh_bindings()
        for side in ("base", "tuned"):
            if not self.texts[side]:
                self.query_one(f"#out-{side}", Static).update(
                    "[dim](no text: the model ended its turn at once)[/]")
            self.query_one(f"#pane-{side}").border_subtitle = side_stats(summary, side)
        seconds = summary.get("seconds")
        took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
        step = summary.get("step")
        at = f" · tuned at step {step}" if isinstance(step, int) else ""
        self.query_one("#compare-wait", WaitNote).done(f"[green]✓[/] done{took}{at}")

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "compare-stream")
        self.generating = False
        self.refresh_bindings()
        self.query_one("#compare-wait", WaitNote).done("[yellow]cancelled[/]")
        self.notify("cancelled", timeout=2)

    def action_earlier(self, delta: int) -> None:
        """Show an earlier compare of the run (``[`` older, ``]`` newer) in the panes."""
        if not self.earlier:
            return
        self.earlier_pos = max(0, min(len(self.earlier) - 1, self.earlier_pos + delta))
        item = self.earlier[self.earlier_pos]
        for side in ("base", "tuned"):
            self.query_one(f"#out-{side}", Static).update(escape(str(item.get(side, ""))))
            self.query_one(f"#pane-{side}").border_subtitle = side_stats(item, side)
        self.query_one("#compare-wait", WaitNote).done(
            f"earlier compare {self.earlier_pos + 1}/{len(self.earlier)} · "
            f"{escape(str(item.get('when', '')))} · prompt: "
            f"{escape(str(item.get('prompt', ''))[:60])}")

    def action_history(self, delta: int) -> None:
        prompt = self.query_one("#compare-prompt", Input)
        history = self.app.settings.prompt_history  # type: ignore[attr-defined]
        if not history:
            return
        self.history_pos = max(-1, min(len(history) - 1, self.history_pos + delta))
        prompt.value = history[self.history_pos] if self.history_pos >= 0 else ""
        prompt.cursor_position = len(prompt.value)


SCREEN = CompareScreen
