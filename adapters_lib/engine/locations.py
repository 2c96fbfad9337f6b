"""Where the engine is found, and where it may listen: its files and its TCP address.

The engine's files (socket, token, lock, pid, info) live in ``engine_dir()``: ``<state
dir>/run`` (``$GEMMA_WORKBENCH_HOME/run`` with a home), a 0700 folder. Never in
``$XDG_RUNTIME_DIR``, which logind empties at logout while the engine — and its runs — go
on: the next client would find no socket and start a second engine on the same devices. The
engine and every client take the paths from here (``engine_files``), so they always agree.

``parse_tcp`` checks an ``--tcp`` value: ``HOST:PORT`` with a loopback host, unless the
caller says a non-loopback address was explicitly asked for (the API is plain HTTP: the
token would cross the network in clear text).

Light: no JAX, no aiohttp (the client imports it).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError

SOCKET_PATH_MAX = 100
"""Bytes a Unix socket path may take here (the kernel's limit is 108, with the NUL)."""


def engine_dir() -> Path:
    home = os.environ.get("GEMMA_WORKBENCH_HOME")
    return Path(home).expanduser() / "run" if home else paths.state_dir() / "run"


def engine_files() -> dict[str, Path]:
    run = engine_dir()
    return {
        "socket": run / "engine.sock",
        "token": run / "engine.token",
        "pid": run / "engine.pid",
        "lock": run / "engine.lock",
        "info": run / "engine.json",
        "log": paths.state_dir() / "engine.log",
    }


def legacy_lock() -> Path | None:
    """The lock an engine of an earlier version holds (in the runtime dir), if it differs."""
    old = paths.runtime_dir() / "engine.lock"
    return None if old == engine_files()["lock"] else old


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise WorkbenchError(f"the engine's socket path is too long for a Unix socket "
                             f"({len(os.fsencode(path))} > {SOCKET_PATH_MAX} bytes): {path}",
                             hint="set GEMMA_WORKBENCH_HOME (or XDG_STATE_HOME) to a shorter "
                                  "folder")


def parse_tcp(text: str, *, any_address: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port); a loopback host unless
    ``any_address`` (``--tcp-any-address``). Port 0 picks a free port."""
    where = "--tcp"
    example = "e.g. --tcp 127.0.0.1:8765 (port 0 picks a free one)"
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise WorkbenchError(f"{text!r} is not HOST:PORT", where=where, hint=example)
    if int(port) > 65535:
        raise WorkbenchError(f"{text!r}: port {port} is out of range (0-65535)",
                             where=where, hint=example)
    if host.startswith("["):
        if not host.endswith("]"):
            raise WorkbenchError(f"{text!r} is not HOST:PORT", where=where, hint=example)
        host = host[1:-1]
    elif ":" in host:
        raise WorkbenchError(f"{text!r}: an IPv6 address goes in brackets",
                             where=where, hint="e.g. --tcp [::1]:8765")
    if not any_address and not is_loopback(host):
        raise WorkbenchError(
            f"{text!r} is not a loopback address: the API is plain HTTP, the token "
            "would cross the network in clear text", where=where,
            hint="bind 127.0.0.1 (reach it over `ssh -L`, or use --remote HOST); to listen "
                 "on another address anyway, add --tcp-any-address")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
