"""``gemma-workbench web [--port N]``: the same TUI in a browser, through textual-serve.

Listens on loopback only (127.0.0.1): reach it from a laptop with an SSH port forward
(``ssh -L 8765:127.0.0.1:8765 HOST``, then open the printed address). Each browser tab
runs its own ``gemma-workbench`` TUI process, a client of the same engine. The address
carries a random token (like Jupyter's): without it the page and its socket are refused,
so another user of a shared machine cannot open a TUI as you.
"""

from __future__ import annotations

import argparse
import hmac
import secrets
import shlex
import socket
import sys

from adapters_lib.errors import WorkbenchError

DEFAULT_PORT = 8765
COOKIE = "gemma_workbench_web"
HOST = "127.0.0.1"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("web", help="serve the TUI in a browser (loopback only; use ssh -L)",
                       description="Serve the workbench TUI through textual-serve on "
                                   "127.0.0.1. Reach it from another machine with an SSH "
                                   "port forward.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT})")
    p.set_defaults(handler=run)


def tui_command(theme: str | None) -> str:
    """The shell command textual-serve runs per browser tab: this Python's TUI."""
    cmd = [sys.executable, "-m", "workbench"] + (["--theme", theme] if theme else [])
    return shlex.join(cmd)


def make_server(port: int, token: str, theme: str | None = None):
    """A textual-serve ``Server`` on loopback whose page and socket need ``token``."""
    from aiohttp import web
    from textual_serve.server import Server

    class GuardedServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(self.guard)
            return app

        @web.middleware
        async def guard(self, request: web.Request, handler):
            if request.path.startswith("/static/"):
                return await handler(request)
            given = request.query.get("token") or request.cookies.get(COOKIE, "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                return web.Response(status=403, text="gemma-workbench web: open the address "
                                    "printed by `gemma-workbench web` (it carries the token)\n")
            response = await handler(request)
            if request.path == "/" and request.query.get("token"):
                response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            return response

        async def handle_index(self, request: web.Request):
            # the socket address follows the address the browser used (an ssh -L port may differ)
            self.public_url = f"http://{request.host}"
            return await super().handle_index(request)

        async def on_startup(self, app: web.Application) -> None:
            print(f"gemma-workbench web: open http://{HOST}:{port}/?token={token}\n"
                  f"  from another machine: ssh -L {port}:{HOST}:{port} THIS_HOST, then the "
                  "same address; Ctrl-C stops serving (runs keep going in the engine)",
                  flush=True)

    return GuardedServer(tui_command(theme), host=HOST, port=port, title="gemma-workbench")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise WorkbenchError(f"--port {args.port} is not a port", where="--port",
                             hint="use 1024–65535, e.g. --port 8765")
    try:  # say it before printing an address that would not answer
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((HOST, args.port))
    except OSError as err:
        raise WorkbenchError(f"cannot listen on {HOST}:{args.port}: {err.strerror or err}",
                             where="--port", hint=f"pick another port: --port {args.port + 1}"
                             ) from None
    make_server(args.port, secrets.token_urlsafe(18), getattr(args, "theme", None)).serve()
    return 0
