"""What every workbench screen shares: the engine port and a safe way to call it.

``EngineClient`` is the protocol the screens need from ``workbench.client.EngineClient``
(same method names and reply shapes: streams yield ``{"type": ..., "data": {...}}``), so screens can be driven by the real client or by a static stand-in
in snapshot tests. Engine calls block (httpx over a Unix socket), so screens make them only
inside thread workers; ``WorkbenchScreen.engine`` wraps a call so that a user mistake
(``WorkbenchError``) or a lost engine becomes a notification instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from textual.screen import Screen

from adapters_lib.errors import WorkbenchError

T = TypeVar("T")


class EngineClient(Protocol):
    def status(self, *, wait: bool = False) -> dict[str, Any]: ...
    def models(self, folders: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]: ...
    def data_check(self, path: str = "", *, format: str = "auto",
                   config: dict[str, Any] | None = None, limit: int = 0) -> dict[str, Any]: ...
    def estimate(self, config: dict[str, Any] | None = None) -> dict[str, Any]: ...

    def create_run(self, config: dict[str, Any]) -> dict[str, Any]: ...
    def list_runs(self) -> list[dict[str, Any]]: ...
    def get_run(self, run_id: str, *, metrics: bool = True,
                events: bool = True) -> dict[str, Any]: ...
    def stop_run(self, run_id: str) -> dict[str, Any]: ...
    def resume_run(self, run_id: str) -> dict[str, Any]: ...
    def delete_run(self, run_id: str) -> dict[str, Any]: ...
    def stream_run(self, run_id: str, since_step: int = 0) -> Iterator[dict[str, Any]]: ...
    def compare(self, prompt: str, run_id: str, *, step: int = -1, max_tokens: int = 128,
                temperature: float = 0.0, seed: int = 0,
                chat: bool = True) -> Iterator[dict[str, Any]]: ...
    def export(self, run_id: str, *, kind: str = "adapter", out: str = "",
               step: int = -1) -> dict[str, Any]: ...


def error_text(err: BaseException) -> str:
    """One line for the user: a ``WorkbenchError`` as is, anything else with its type."""
    if isinstance(err, WorkbenchError):
        return str(err)
    text = str(err) or type(err).__name__
    return text.splitlines()[0][:300]


class WorkbenchScreen(Screen):
    """A screen that talks to the engine only from workers."""

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
