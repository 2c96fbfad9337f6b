"""Compare: one prompt, base and tuned model streaming side by side.

Pick the run and one of its checkpoints, set the decoding (temperature, max tokens, seed),
type a prompt and press enter (ctrl+r also sends: some terminals cannot send ctrl+enter).
Tokens arrive from ``client.compare(...)`` in a thread worker and are appended to the pane
of their side. Up/down in the prompt walk the prompt history (remembered in settings.toml).
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

from workbench.screens.base import WorkbenchScreen, error_text
from workbench.screens.runstate import RunView
from workbench.widgets.lora_form import parse_number
from workbench.widgets.nav import NavBar

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
    BINDINGS = [
        Binding("ctrl+r", "send", "Send prompt", id="compare.send"),
        Binding("ctrl+x", "cancel", "Cancel", id="compare.cancel"),
        Binding("up", "history(1)", "Older prompt", id="compare.history_older", show=False),
        Binding("down", "history(-1)", "Newer prompt", id="compare.history_newer", show=False),
        Binding("escape", "blur", "Leave field", id="compare.blur", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(name="compare")
        self.view: RunView | None = None
        self.history_pos = -1
        self.texts = {"base": "", "tuned": ""}
        self.summary: dict[str, Any] | None = None
        """The ``done`` item of the last generation (token counts, seconds), once it ends."""

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
        yield Input(placeholder="prompt — enter sends, ↑/↓ history", id="compare-prompt", compact=True)
        with Horizontal(id="compare-panes"):
            with Vertical(classes="pane"):
                yield Label("base", classes="pane-title")
                with VerticalScroll():
                    yield Static("", id="out-base", classes="out")
            with Vertical(classes="pane"):
                yield Label("tuned", classes="pane-title", id="tuned-title")
                with VerticalScroll():
                    yield Static("", id="out-tuned", classes="out")
        yield Footer()

    def on_screen_resume(self) -> None:
        """Shown (the first time too): refresh the run list."""
        self.load_runs()

    def attach(self, run_id: str) -> None:
        self.app.current_run = run_id  # type: ignore[attr-defined]
        self.load_runs()

    @work(thread=True, exclusive=True, group="compare-runs")
    def load_runs(self) -> None:
        runs = self.engine(self.client.list_runs)
        if runs is not None:
            self.ui(self.show_runs, runs)

    def show_runs(self, runs: list[dict[str, Any]]) -> None:
        ids = sorted((str(r.get("id", r.get("run_id"))) for r in runs), reverse=True)
        picker = self.query_one("#compare-run", Select)
        current = getattr(self.app, "current_run", None)
        picker.set_options([(i, i) for i in ids])
        if current in ids:
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
        self.ui(self.show_checkpoints, view)

    def show_checkpoints(self, view: RunView) -> None:
        self.view = view
        picker = self.query_one("#compare-step", Select)
        picker.set_options([("latest", LATEST)] + [(f"step {s}", s) for s in
                                                   reversed(view.checkpoints)])
        picker.value = LATEST
        self.query_one("#tuned-title", Label).update(f"tuned · {view.run_id}")

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
        self.query_one("#out-base", Static).update("[dim]…[/]")
        self.query_one("#out-tuned", Static).update("[dim]…[/]")
        self.stream(req)

    @work(thread=True, exclusive=True, group="compare-stream")
    def stream(self, req: dict[str, Any]) -> None:
        worker = get_current_worker()
        try:
            for ev in self.client.compare(**req):
                if worker.is_cancelled:
                    return
                side, text = token_side(ev)
                if side == "done":
                    data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
                    self.ui(self.finish, data)
                    break
                if side == "error":
                    self.ui(self.notify, text, title="compare", severity="error")
                    break
                if side in self.texts and text:
                    self.ui(self.append, side, text)
        except Exception as err:  # noqa: BLE001
            self.ui(self.notify, error_text(err), title="compare", severity="error", timeout=8)

    def append(self, side: str, text: str) -> None:
        self.texts[side] += text
        self.query_one(f"#out-{side}", Static).update(escape(self.texts[side]))

    def finish(self, summary: dict[str, Any]) -> None:
        """Both sides are done: say how many tokens each made (an empty answer shows)."""
        self.summary = summary
        tokens = summary.get("tokens") if isinstance(summary.get("tokens"), dict) else {}
        for side in ("base", "tuned"):
            if not self.texts[side]:
                self.query_one(f"#out-{side}", Static).update(
                    "[dim](no text: the model ended its turn at once)[/]")
        seconds = summary.get("seconds")
        self.notify(" · ".join(f"{s} {tokens.get(s, '?')} tokens" for s in ("base", "tuned"))
                    + (f" · {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""),
                    title="compare done", timeout=4)

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "compare-stream")
        self.notify("cancelled", timeout=2)

    def action_history(self, delta: int) -> None:
        prompt = self.query_one("#compare-prompt", Input)
        history = self.app.settings.prompt_history  # type: ignore[attr-defined]
        if not history:
            return
        self.history_pos = max(-1, min(len(history) - 1, self.history_pos + delta))
        prompt.value = history[self.history_pos] if self.history_pos >= 0 else ""
        prompt.cursor_position = len(prompt.value)

    def action_blur(self) -> None:
        self.set_focus(None)


SCREEN = CompareScreen
