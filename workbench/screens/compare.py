"""Compare: one prompt, base and tuned model streaming side by side.

Pick the run and a checkpoint, set the decoding, type a prompt, enter (or ctrl+r). Tokens
from ``client.compare(...)`` (a thread worker) fill the pane of their side; up/down walk
the prompt history. Arriving puts the focus in the prompt; ``escape`` leaves it, ``enter``
comes back, and while a compare runs ``escape`` (or ``ctrl+x``) cancels it. Each pane's frame
says what its side made (tokens, tokens/s, why it stopped). Every compare is kept beside the
run (``save``: ``<run>/compare/*.jsonl``); ``[`` ``]`` walk the earlier ones. ``ctrl+n``
starts or ends a conversation (multi-turn A/B, ``compare_turns``).
"""

from __future__ import annotations

from contextlib import closing, suppress
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import var
from textual.widgets import Footer, Input, Label, Select, Static
from textual.worker import get_current_worker

from adapters_lib.engine import api
from workbench.screens.base import WorkbenchScreen, error_text, is_text_field
from workbench.screens.compare_history import (
    DECODING,
    LATEST,
    blank_words,
    checkpoint_options,
    decoding_fields,
    done_frame,
    idle_line,
    side_stats,
    token_side,
)
from workbench.screens.compare_turns import Conversation, record_prompt, record_text
from workbench.screens.runstate import RunView
from workbench.widgets.nav import NavBar
from workbench.widgets.waits import WaitNote


class CompareScreen(WorkbenchScreen):
    AUTO_FOCUS = "#compare-prompt"
    BINDINGS = [
        Binding("ctrl+r", "send", "Send", id="compare.send"),
        # priority: the prompt's own ctrl+x (cut) and escape (leave the field) must not
        # swallow it while tokens stream; when nothing streams they do their usual work
        Binding("escape", "cancel", "Cancel", id="compare.cancel", priority=True),
        Binding("ctrl+x", "cancel", "Cancel", id="compare.cancel_x", priority=True, show=False),
        # a key bound here replaces the screens' own escape binding: bound again
        Binding("escape", "leave_field", "Leave field", id="compare.leave_field"),
        Binding("ctrl+n", "conversation", "Multi-turn", id="compare.conversation"),
        Binding("enter", "focus_prompt", "Type a prompt", id="compare.focus_prompt"),
        Binding("up", "history(1)", "Older prompt", id="compare.history_older", show=False),
        Binding("down", "history(-1)", "Newer prompt", id="compare.history_newer", show=False),
        Binding("left_square_bracket", "earlier(1)", "Earlier compare", key_display="[",
                id="compare.earlier"),
        Binding("right_square_bracket", "earlier(-1)", "Later compare", key_display="]",
                id="compare.later", show=False),
    ]

    generating = var(False, bindings=True)
    """A generation streams (escape cancels it); the footer's keys follow it."""

    def __init__(self) -> None:
        super().__init__(name="compare")
        self.view: RunView | None = None
        self.history_pos = -1
        self.texts = {"base": "", "tuned": ""}
        self.summary: api.CompareDone | None = None
        """The ``done`` item of the last generation (token counts, seconds), once it ends."""
        self.earlier: list[dict[str, Any]] = []
        """Earlier compares of the run, newest first; ``earlier_pos`` is the one shown."""
        self.earlier_pos = -1
        self.conversation: Conversation | None = None
        """The multi-turn A/B under way (``ctrl+n``), or None: every prompt alone."""
        self.asked = ""
        """The prompt being answered."""
        self.titles: dict[str, str] = {}
        """Each pane's title (its side, model or run); a finished compare adds its precision."""

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
            yield Input(DECODING["temperature"], id="compare-temperature", type="number", classes="tiny",
                        compact=True)
            yield Label("max new", classes="label-short")
            yield Input(DECODING["max_new_tokens"], id="compare-max-new-tokens", type="integer",
                        classes="tiny", compact=True)
            yield Label("seed", classes="label-short")
            yield Input(DECODING["seed"], id="compare-seed", type="integer", classes="tiny", compact=True)
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

    @on(Input.Changed, "#compare-temperature, #compare-max-new-tokens, #compare-seed")
    def show_same(self) -> None:
        """The line that says both sides decode alike (what the A/B is fair about)."""
        temp, max_new, seed = (self.query_one(f"#compare-{k.replace('_', '-')}", Input).value or DECODING[k]
                               for k in ("temperature", "max_new_tokens", "seed"))
        self.query_one("#compare-same", Static).update(
            f"same seed, same settings on both sides: seed {escape(seed)} · temperature "
            f"{escape(temp)} · max {escape(max_new)} new tokens · chat template")

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
        if action == "leave_field" and self.generating:
            return False  # escape cancels first
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

    def show_runs(self, runs: list[api.RunSummary]) -> None:
        ids = sorted((r.id for r in runs), reverse=True)
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
        record = self.engine(self.client.get_run, run_id, metrics=False, events=False)
        if record is None:
            return
        with suppress(Exception):  # its programs compile behind (a checkpoint of a run
            self.client.prepare_compare(run_id)  # shares them); failing, the Compare compiles them
        view = RunView(run_id)
        view.apply_record(record)
        listed = self.engine(self.client.compares, run_id)  # read where the run is (--remote too)
        self.ui(self.show_checkpoints, view, list(listed.compares) if listed else [])

    def show_checkpoints(self, view: RunView, earlier: list[dict[str, Any]]) -> None:
        """Every checkpoint of the run in the picker (newest first); the choice is kept when
        the list grows."""
        same_run = self.view is not None and self.view.run_id == view.run_id
        self.view = view
        picker = self.query_one("#compare-step", Select)
        keep = picker.value if same_run and picker.value in view.checkpoints else LATEST
        picker.set_options(checkpoint_options(view.checkpoints, view.best_step))
        picker.value = keep
        picker.mutate_reactive(Select.value)  # the same value: its new label is shown anyway
        if not same_run and self.conversation is not None:
            self.conversation = Conversation()  # another run: a new conversation
            self.show_conversation()
        model = (view.config.get("model") or {}).get("source", "")
        self.titles = {"tuned": f"tuned · {escape(view.run_id)}",
                       "base": f"base · {escape(str(model))}" if model else "base"}
        for side, title in self.titles.items():  # a finished compare's says what it ran on too
            shown = done_frame(self.summary, side, title)[0] if same_run and self.summary else title
            self.query_one(f"#pane-{side}").border_title = shown
        self.earlier, self.earlier_pos = earlier, -1
        if not self.generating and self.summary is None:
            self.query_one("#compare-wait", WaitNote).done(idle_line(len(earlier), len(view.checkpoints)))

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
        decoding, bad = decoding_fields({k: self.query_one(f"#compare-{k.replace('_', '-')}", Input).value
                                         for k in DECODING})
        if bad:
            self.notify(f"{', '.join(bad)}: not a valid value", severity="error")
            return None
        step = self.query_one("#compare-step", Select).value
        req: dict[str, Any] = {"prompt": prompt, "run_id": str(run), "step": int(step), **decoding,
                               "save": True}
        if self.conversation is not None and self.conversation.turns:
            req["messages"] = self.conversation.messages(req.pop("prompt"))
            req["prompt"] = ""
        return req

    def action_send(self) -> None:
        req = self.request()
        if req is None:
            return
        prompt_field = self.query_one("#compare-prompt", Input)
        self.asked = prompt_field.value.strip()
        self.app.remember_prompt(self.asked)  # type: ignore[attr-defined]
        if self.conversation is not None:
            prompt_field.value = ""  # the next turn is typed afresh
        self.history_pos = -1
        self.texts = {"base": "", "tuned": ""}
        self.summary = None
        self.generating = True
        for side in ("base", "tuned"):
            self.show_text(side, "[dim]…[/]")
        for side in ("base", "tuned"):
            self.query_one(f"#pane-{side}").border_subtitle = ""
        step = "the latest checkpoint" if req["step"] == LATEST else f"step {req['step']}"
        self.query_one("#compare-wait", WaitNote).start(
            f"loading {step} (restore + compile the first time), then generating",
            hint="esc cancels")
        self.stream(req)

    @work(thread=True, exclusive=True, group="compare-stream")
    def stream(self, req: dict[str, Any]) -> None:
        worker = get_current_worker()
        try:  # closing: a cancelled compare hangs up, and the engine stops generating
            with closing(self.client.compare(**req)) as items:  # type: ignore[arg-type]
                if self.follow(items, worker) or worker.is_cancelled:
                    return
        except Exception as err:  # noqa: BLE001
            if not worker.is_cancelled:
                self.ui(self.failed, error_text(err))
            return
        self.ui(self.failed, "the engine closed the stream before the end")

    def follow(self, items: Any, worker: Any) -> bool:
        """Fold the stream into the panes; True once it ended (done, error or cancelled)."""
        first = True
        for ev in items:
            if worker.is_cancelled:
                return True
            side, text = token_side(ev)
            if side == "done":
                self.ui(self.finish, ev.data)
                return True
            if side == "error":
                self.ui(self.failed, text)
                return True
            if side in self.texts and text:
                if first:
                    first = False
                    self.ui(self.first_token)
                self.ui(self.append, side, text)
        return False

    def first_token(self) -> None:
        self.query_one("#compare-wait", WaitNote).start("generating", "esc cancels")

    def failed(self, text: str) -> None:
        self.generating = False
        for side in ("base", "tuned"):
            if not self.texts[side]:
                self.show_text(side, "")
        self.query_one("#compare-wait", WaitNote).done(f"[b red]✗[/] {escape(text)}")
        self.notify(text, title="compare", severity="error", timeout=8)

    def append(self, side: str, text: str) -> None:
        self.texts[side] += text
        self.show_text(side, escape(self.texts[side]))

    def show_text(self, side: str, markup: str) -> None:
        """A pane's text: the answer so far, under the conversation's turns if one is on."""
        if self.conversation is not None and self.asked:
            history = self.conversation.transcript(side)
            markup = f"[b]› {escape(self.asked)}[/b]\n{markup}"
            markup = f"{history}\n\n{markup}" if history else markup
        self.query_one(f"#out-{side}", Static).update(markup)

    def finish(self, summary: api.CompareDone) -> None:
        """Both sides are done: each pane's frame says what its side made and why it stopped
        (an empty answer says so)."""
        self.summary = summary
        self.generating = False
        for side in ("base", "tuned"):
            if not self.texts[side]:
                self.show_text(side, "[dim](no text: the model ended its turn at once)[/]")
            elif not self.texts[side].strip():  # the demo's base says 64 line breaks
                self.show_text(side, f"[dim](only blank space: {blank_words(self.texts[side])})[/]")
        if self.conversation is not None:
            self.conversation.add(self.asked, self.texts)
            self.asked = ""
            self.show_conversation()
        for side in ("base", "tuned"):
            pane = self.query_one(f"#pane-{side}")
            pane.border_title, pane.border_subtitle = done_frame(summary, side, self.titles.get(side, side))
        run = self.query_one("#compare-run", Select).value
        if summary.saved and run is not Select.NULL:
            self.load_checkpoints(str(run))  # the new compare joins the earlier ones
        took = f" in {summary.seconds:.1f} s" if summary.seconds else ""
        at = f" · tuned at step {summary.step}" if summary.step is not None else ""
        self.query_one("#compare-wait", WaitNote).done(f"[green]✓[/] done{took}{at}")

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "compare-stream")
        self.generating = False
        self.query_one("#compare-wait", WaitNote).done("[yellow]cancelled[/]")
        self.notify("cancelled", timeout=2)

    def action_conversation(self) -> None:
        """``ctrl+n``: start a multi-turn A/B (each prompt the next turn), or end it."""
        self.conversation = None if self.conversation is not None else Conversation()
        self.show_conversation()
        for side in ("base", "tuned"):
            self.query_one(f"#out-{side}", Static).update("")
            self.query_one(f"#pane-{side}").border_subtitle = ""
        self.notify("multi-turn: each prompt is the next turn" if self.conversation else
                    "multi-turn ended: every prompt alone", timeout=3)

    def show_conversation(self) -> None:
        prompt = self.query_one("#compare-prompt", Input)
        if self.conversation is None:
            prompt.border_title = None
            return
        turn = len(self.conversation.turns) + 1
        prompt.border_title = f"multi-turn · turn {turn} · ctrl+n ends it"

    def action_earlier(self, delta: int) -> None:
        """Show an earlier compare of the run (``[`` older, ``]`` newer) in the panes."""
        if not self.earlier:
            return
        self.earlier_pos = max(0, min(len(self.earlier) - 1, self.earlier_pos + delta))
        item = self.earlier[self.earlier_pos]
        for side in ("base", "tuned"):
            self.query_one(f"#out-{side}", Static).update(record_text(item, side))
            self.query_one(f"#pane-{side}").border_subtitle = side_stats(item, side)
        step = item.get("step")
        at = f" · step {step}" if isinstance(step, int) else ""
        self.query_one("#compare-wait", WaitNote).done(
            f"earlier compare {self.earlier_pos + 1}/{len(self.earlier)} · "
            f"{escape(str(item.get('when', '')))}{at} · prompt: "
            f"{escape(record_prompt(item)[:60])}")

    def action_history(self, delta: int) -> None:
        prompt = self.query_one("#compare-prompt", Input)
        history = self.app.settings.prompt_history  # type: ignore[attr-defined]
        if not history:
            return
        self.history_pos = max(-1, min(len(history) - 1, self.history_pos + delta))
        prompt.value = history[self.history_pos] if self.history_pos >= 0 else ""
        prompt.cursor_position = len(prompt.value)


SCREEN = CompareScreen
