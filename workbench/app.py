"""The workbench TUI: ``WorkbenchApp`` and ``run_app`` (called by ``gemma-workbench``).

Six screens, one per file in ``workbench/screens`` (models, configure, train, compare, runs,
help), reached by the keys 1–5 and ``?``, by the mouse (the tab strip at the top) and by the
command palette (ctrl+p), which offers every action of the app and of the current screen.
The app holds one engine client; screens call it only from thread workers. The theme
(``workbench-dark`` / ``workbench-light``) is switched with ctrl+t and remembered in
``settings.toml``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import threading
import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

import themes
from workbench.screens.base import EngineClient, EnginePhase, error_text, phase_of
from workbench.settings import Settings, load_settings, save_settings
from workbench.widgets.waits import Wait

if TYPE_CHECKING:  # the config module costs ~0.1 s: Configure imports it when first shown
    from adapters_lib.config import RunConfig

SCREENS = ("models", "configure", "train", "compare", "runs", "help")
WARM_UP_AFTER_S = 3.0
"""When later screens are imported if the first one has not asked sooner."""


def _screen_factory(name: str):
    """Import a screen's module when it is first shown (keeps the first frame fast)."""

    def make() -> Screen:
        module = importlib.import_module(f"workbench.screens.{name}")
        return module.SCREEN()

    return make


class WorkbenchApp(App):
    TITLE = "gemma-workbench"
    CSS_PATH = themes.STYLES
    MODES = {name: _screen_factory(name) for name in SCREENS}
    DEFAULT_MODE = "models"
    ENABLE_COMMAND_PALETTE = True
    # The screen keys are on the nav strip at the top; the footer keeps its room for the
    # keys of the screen (at 80 columns it has no space for both).
    BINDINGS = [
        Binding("1", "show('models')", "Models", id="app.models", show=False),
        Binding("2", "show('configure')", "Configure", id="app.configure", show=False),
        Binding("3", "show('train')", "Train", id="app.train", show=False),
        Binding("4", "show('compare')", "Compare", id="app.compare", show=False),
        Binding("5", "show('runs')", "Runs", id="app.runs", show=False),
        Binding("question_mark,f1", "show('help')", "Help", key_display="?", id="app.help"),
        Binding("ctrl+t", "toggle_theme", "Theme", id="app.theme", show=False),
        Binding("q", "quit", "Quit", id="app.quit"),
    ]

    def __init__(self, client: EngineClient | None = None, *, theme: str | None = None,
                 mode: str = "models", run_id: str | None = None,
                 defaults: RunConfig | None = None, remember: bool = True,
                 local_catalog: bool | None = None) -> None:
        """``client``: an engine client (default: connect, starting the engine on first use);
        ``defaults``: the config the Configure form starts from; ``remember``: read and write
        settings.toml (tests turn it off); ``local_catalog``: let the Models screen scan the
        weights on this machine while the engine starts (default: when the app makes its own
        client of the local engine; the engine's answer replaces it)."""
        super().__init__()
        from workbench import remote

        self.remote = remote.selected() if client is None else None
        """The remote engine's host (``--remote``), or None for this machine's engine."""
        if local_catalog is None:  # a remote engine's weights are not on this machine
            local_catalog = client is None and self.remote is None
        self.local_catalog = local_catalog
        self.engine_phase = EnginePhase(Wait("engine connecting"))
        """What the engine is doing (starting, importing JAX, ready), shown on the nav strip."""
        self.config_defaults = defaults
        self.model_choice: str | None = None
        self._client = client
        self._client_lock = threading.Lock()
        self._warmed = False
        self.settings = load_settings() if remember else Settings()
        self.remember = remember
        self.start_mode = mode
        self.current_run: str | None = run_id
        """The run the Train and Compare screens show (set by Configure, Runs, or the CLI)."""
        for t in themes.THEMES:
            self.register_theme(t)
        wanted = theme or self.settings.theme or themes.DEFAULT_THEME
        self.theme = wanted if wanted in self.available_themes else themes.DEFAULT_THEME

    @property
    def client(self) -> EngineClient:
        """The engine client; the first use (always in a worker) connects, starting the
        engine detached when none answers."""
        with self._client_lock:
            if self._client is None:
                from workbench.connect import connect

                self._client = connect()
            return self._client

    def on_mount(self) -> None:
        self.switch_mode(self.start_mode)
        # connecting imports httpx (~0.2 s, the GIL held): after the first frame
        self.call_after_refresh(self.run_worker, self.watch_engine, thread=True, group="engine",
                                exit_on_error=False)
        # the warm-up holds the GIL for ~0.5 s: not while the first screen fills in
        self.set_timer(WARM_UP_AFTER_S, self.warm_up)

    def warm_up(self) -> None:
        """Import what later screens need, in a thread, once (the Models screen calls this
        when its catalog is shown; a timer calls it otherwise)."""
        if not self._warmed:
            self._warmed = True
            self.run_worker(warm_imports, thread=True, group="warm-up", exit_on_error=False)

    # ------------------------------------------------------------------ the engine's state

    def watch_engine(self) -> None:
        """(Thread worker) connect — starting the engine when none answers — then follow its
        JAX start-up until it is ready, so that every screen can say what it waits for."""
        if self._client is None and self.remote is not None:
            self.engine_phase = EnginePhase(Wait(f"ssh {self.remote.host}"))
        elif self._client is None:
            from workbench.engine_process import engine_files

            if not engine_files()["socket"].exists():
                self.engine_phase = EnginePhase(Wait("engine starting"))
        try:
            client = self.client
        except Exception as err:  # noqa: BLE001 - shown on the nav strip and as a notice
            self.engine_phase = EnginePhase(error=error_text(err))
            self.call_from_thread(self.notify, error_text(err), title="engine",
                                  severity="error", timeout=10)
            return
        on_link = getattr(client, "on_link", None)
        if on_link is not None and getattr(client, "where", "local") != "local":
            on_link(self.link_changed)
        self.follow_engine(client)

    def link_changed(self, event: Any) -> None:
        """(Any thread) the ssh link to a remote engine dropped, reconnects or is back."""
        if event.kind in ("down", "reconnecting"):
            self.engine_phase = EnginePhase(Wait(f"{event.where}: reconnecting"))
        elif event.kind == "failed":
            self.engine_phase = EnginePhase(error=f"{event.where}: {event.message}")
        elif event.kind == "up":
            self.run_worker(partial(self.follow_engine, self.client), thread=True,
                            group="engine", exit_on_error=False)

    def follow_engine(self, client: EngineClient) -> None:
        """(Thread worker) poll the engine's status until its JAX start-up is done, or until
        the worker is cancelled (the app quits: an engine still importing, or one stuck in
        its start-up, must not hold the exit)."""
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                phase = phase_of(client.status(), self.engine_phase)
            except Exception as err:  # noqa: BLE001
                phase = EnginePhase(error=error_text(err))
            self.engine_phase = phase
            if phase.wait is None:
                where = getattr(client, "where", "local")
                if where != "local" and not phase.error:
                    self.engine_phase = EnginePhase(ready=f"{where} {phase.ready}")
                return
            time.sleep(0.25)

    def engine_note(self) -> str:
        """The nav strip's right side: the engine's wait with its time, or its state."""
        return self.engine_phase.markup()

    # ------------------------------------------------------------------ actions

    def action_show(self, name: str) -> None:
        if name in SCREENS and self.current_mode != name:
            self.switch_mode(name)

    def open_run(self, run_id: str, mode: str = "train") -> None:
        """Make ``run_id`` the current run and show it on ``mode`` (train or compare)."""
        self.current_run = run_id  # the screen follows it when shown (its on_screen_resume)
        self.switch_mode(mode)

    def action_toggle_theme(self) -> None:
        names = [t.name for t in themes.THEMES]
        nxt = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.theme = nxt
        self.notify(f"theme: {nxt}", timeout=2)

    def watch_theme(self, theme: str) -> None:
        if self.remember and theme != self.settings.theme:
            self.settings = Settings(theme=theme, prompt_history=self.settings.prompt_history)
            try:
                save_settings(self.settings)
            except OSError as err:
                self.notify(f"could not save settings: {err}", severity="warning")

    def remember_prompt(self, prompt: str) -> None:
        self.settings = self.settings.with_prompt(prompt)
        if self.remember:
            try:
                save_settings(self.settings)
            except OSError:
                pass

    # ------------------------------------------------------------------ palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every binding of the app and of the current screen, plus Textual's own."""
        seen: set[str] = set()
        for namespace, bindings in ((screen, screen.BINDINGS), (self, self.BINDINGS)):
            for b in bindings:
                if not isinstance(b, Binding) or not b.description or b.action in seen:
                    continue
                seen.add(b.action)
                key = b.key_display or b.key.split(",")[0]
                yield SystemCommand(b.description, f"{b.id} · key {key}",
                                    partial(self._palette_action, namespace, b.action))
        yield from super().get_system_commands(screen)

    async def _palette_action(self, namespace: Any, action: str) -> None:
        await self.run_action(action, namespace)


def warm_imports() -> None:
    """After the first frame, import in a thread what later screens need (plotext alone costs
    ~0.5 s), so that showing the first plot never stalls the UI thread."""
    import plotext  # noqa: F401

    for name in SCREENS:
        importlib.import_module(f"workbench.screens.{name}")


def run_app(theme: str | None = None) -> int:
    """Open the TUI; returns the exit code for the CLI."""
    app = WorkbenchApp(theme=theme)
    # our own loop: asyncio.run() would wait, after the last frame, for every thread worker
    # still blocked on the engine (quitting while the engine starts took 36 s)
    loop = asyncio.new_event_loop()
    try:
        app.run(loop=loop)
        code = int(app.return_code or 0)
    except KeyboardInterrupt:
        code = 130
    leave_now(code)
    return code


def leave_now(code: int) -> None:
    """Exit at once when worker threads still wait on the engine: nothing of theirs needs
    keeping (the engine and its runs live on), and Python would join them at exit."""
    waiting = [t for t in threading.enumerate()
               if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if waiting:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
