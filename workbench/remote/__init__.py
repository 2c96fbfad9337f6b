"""A remote engine over SSH: ``gemma-workbench --remote [user@]host`` (docs/accelerators.md).

- ``spec``: which host (``--remote`` > ``GEMMA_WORKBENCH_REMOTE`` > ``remote`` in
  settings.toml) and which command runs gemma-workbench there;
- ``ssh``: one OpenSSH ControlMaster per host, its files in a 0700 directory;
- ``link``: the handshake (start the engine there, read its token, forward its socket,
  check the versions); ``resume``: the reconnects (retry, resume streams);
- ``relay``: commands that look at the remote machine's own files (``engine``, ``doctor``,
  ``data``, ``models``) run there, through the same connection;
- ``upload``: ``train --upload FILE`` copies a dataset into the engine's data dir.

``select(spec)`` (the CLI does it for ``--remote``) makes ``workbench.connect.connect()``
— so every command and the TUI — return a client of that engine. A client of a remote
engine has ``client.where == "user@host"`` (``"local"`` otherwise) and ``client.on_link(cb)``
to hear ``LinkEvent``s (``down``, ``reconnecting``, ``up``, ``failed``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workbench.remote.spec import RemoteSpec, resolve

if TYPE_CHECKING:  # the link module imports httpx: only when a remote engine is used
    from workbench.client import EngineClient
    from workbench.remote.link import LinkEvent, RemoteLink

__all__ = ["RemoteSpec", "connect", "link_for", "print_events", "resolve", "select", "selected"]

_selected: RemoteSpec | None = None
_links: dict[str, RemoteLink] = {}
_lock = threading.Lock()
_default_listeners: list[Callable[[LinkEvent], Any]] = []


def select(spec: RemoteSpec | None, *, listener: Callable[[LinkEvent], Any] | None = None) -> None:
    """Make ``spec`` the engine of ``workbench.connect.connect()`` in this process."""
    global _selected
    _selected = spec
    _default_listeners.clear()
    if listener is not None:
        _default_listeners.append(listener)


def selected() -> RemoteSpec | None:
    return _selected


def export_choice(spec: RemoteSpec) -> None:
    """Put the choice in this process's environment, for the processes it starts (``web``
    runs one TUI per browser tab)."""
    from workbench.remote.spec import ENV_COMMAND, ENV_REMOTE

    os.environ[ENV_REMOTE] = spec.host
    if spec.command:
        os.environ[ENV_COMMAND] = spec.command


def link_for(spec: RemoteSpec) -> RemoteLink:
    """The one link of this process to ``spec``'s host (made on first use, not opened)."""
    from workbench.remote.link import RemoteLink

    with _lock:
        link = _links.get(spec.key)
        if link is None or link.spec != spec:
            link = _links[spec.key] = RemoteLink(spec, listeners=_default_listeners)
        return link


def connect(spec: RemoteSpec, *, interactive: bool | None = None) -> EngineClient:
    """A client of the engine on ``spec.host``, started there if needed.

    ``interactive`` (default: stdin is a terminal): ssh may ask for a passphrase here."""
    from workbench.client import EngineClient

    link = link_for(spec)
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    link.open(interactive=interactive)
    return EngineClient(socket_path=link.socket_path, link=link)


def print_events(event: LinkEvent) -> None:
    """The CLI's listener: one line on stderr per change of the link."""
    if event.kind in ("down", "up", "failed") or event.attempt in (1, 5, 20):
        print(f"remote: {event.message}", file=sys.stderr, flush=True)
