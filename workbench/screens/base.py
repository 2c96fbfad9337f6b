"""What every workbench screen shares: the engine port and a safe way to call it.

``EngineClient`` is ``workbench.engine_calls.EngineCalls``, the typed calls the real client
has (typed replies, streams of ``api.StreamItem``), so screens can be driven by the real
client or by a test stand-in that answers the same commands. Engine calls block (httpx over a Unix socket), so screens make them only
inside thread workers; ``WorkbenchScreen.engine`` wraps a call so that a user mistake
(``WorkbenchError``) or a lost engine becomes a notification instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.markup import escape
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, TextArea

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from workbench.engine_calls import EngineCalls
from workbench.widgets.waits import Wait

T = TypeVar("T")


EngineClient = EngineCalls
"""What a screen holds of the engine: the typed calls (``workbench.engine_calls``), answered
by the real client or by a test's stand-in built on the same class."""


def error_text(err: BaseException) -> str:
    """One line for the user: a ``WorkbenchError`` as is, anything else with its type."""
    if isinstance(err, WorkbenchError):
        return str(err)
    text = str(err) or type(err).__name__
    return text.splitlines()[0][:300]


@dataclass(frozen=True)
class EnginePhase:
    """What the engine is doing: waiting for something (``wait``), ready, or broken."""

    wait: Wait | None = None
    ready: str = ""
    error: str = ""

    def markup(self) -> str:
        if self.error:
            return f"[b red]engine: {escape(self.error[:60])}[/]"
        if self.wait is not None:
            return f"[yellow]{escape(self.wait.what)} {self.wait.elapsed:.1f}s[/]"
        return f"[dim]{escape(self.ready)}[/]"


def phase_of(status: api.EngineStatus, before: EnginePhase | None = None) -> EnginePhase:
    """The phase an engine ``status`` reply tells (its JAX start-up, then ready).

    A wait that goes on keeps its start time (``before``), so the elapsed time keeps counting.
    """
    jax = status.jax
    if jax.error:
        return EnginePhase(error=f"JAX failed: {jax.error}")
    what = ("importing JAX" if jax.loading else "importing gemma" if not jax.modules_ready else "")
    if what:
        if before is not None and before.wait is not None and before.wait.what == what:
            return before
        return EnginePhase(Wait(what))
    backend = status.backend or ""
    return EnginePhase(ready=f"engine ✓ {backend}×{len(status.devices)}" if status.devices else "engine ✓")


def is_text_field(widget: Any) -> bool:
    return isinstance(widget, (Input, TextArea))


class WorkbenchScreen(Screen):
    """A screen that talks to the engine only from workers.

    Keys: while a text field has the focus, every printable key goes into it (digits, ``?``,
    ``q`` included); ``escape`` leaves the field (the footer says so while one has the focus).
    """

    BINDINGS = [Binding("escape", "leave_field", "Leave field", id="screen.leave_field")]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_field":
            return is_text_field(self.focused)
        return True

    def action_leave_field(self) -> None:
        self.leave_field()

    def leave_field(self) -> None:
        """Where escape takes the focus from a text field (a screen may pick a better place)."""
        self.set_focus(None)

    @property
    def client(self) -> EngineClient:
        return self.app.client  # type: ignore[attr-defined]

    def engine(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Run ``call`` (in a thread worker); on failure notify and return None."""
        try:
            return call(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - shown to the user, never swallowed silently
            self.app.call_from_thread(self.notify, error_text(err), title="engine",
                                      severity="error", timeout=8)
            return None

    def ui(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Apply a result on the UI thread (from a thread worker); ignore a closed app."""
        try:
            self.app.call_from_thread(callback, *args, **kwargs)
        except RuntimeError:
            pass
