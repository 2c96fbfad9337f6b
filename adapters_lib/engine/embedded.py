"""The engine inside this process: ``--in-process`` (machines without an engine daemon).

``EmbeddedEngine`` builds the same ``Engine`` the daemon builds (its handler table, queue,
device thread, runtime) and serves the same API (``server.make_app``) on a private Unix socket
in a fresh 0700 folder, from an event loop in a thread of its own. A client of that socket
(``workbench.client.EngineClient``) then sends commands exactly as it would to the daemon: one
code path for every command, whether the engine is a daemon, remote, or here. Nothing is
written to the engine's own files (socket, token, lock), so no other client mistakes it for
the user's engine; it ends with this process (``close``: the active run is asked to stop at its
next step and checkpoints, as a daemon's shutdown does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

STOP_TIMEOUT_S = 300.0


class EmbeddedEngine:
    """The engine and its API in this process (see the module doc)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gemma-workbench-engine-"))
        self.socket = self.folder / "engine.sock"
        self.token = secrets.token_urlsafe(32)
        self.engine: Any = None
        self._loop = asyncio.new_event_loop()
        self._runner: Any = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="embedded-engine", daemon=True)
        self._log_level: int | None = None
        self._console: logging.Handler | None = None

    def start(self) -> EmbeddedEngine:
        # a run's progress lines (INFO) reach its train.log and stream as the daemon's do; this
        # process's terminal gets warnings only, one line each (the client prints the stream's
        # lines), and a library's root-level logging call cannot install a handler of its own
        logger = logging.getLogger("adapters_lib")
        self._log_level = logger.level
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        if not logging.root.handlers:
            self._console = logging.StreamHandler()
            self._console.setLevel(logging.WARNING)
            self._console.setFormatter(logging.Formatter("%(message)s"))
            logging.root.addHandler(self._console)
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            self.close()
            raise self._failed
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
        except BaseException as e:  # noqa: BLE001 - handed to start()
            self._failed = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _open(self) -> None:
        from aiohttp import web

        from adapters_lib.engine.handlers import HANDLERS
        from adapters_lib.engine.server import make_app
        from adapters_lib.engine.service import Engine

        self.engine = Engine(handlers=HANDLERS, warm=False)
        self._runner = web.AppRunner(make_app(self.engine, self.token), handle_signals=False,
                                     access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket)).start()
        self.socket.chmod(0o600)
        self.engine.listen = {"socket": str(self.socket)}
        self.engine.start()

    def close(self) -> None:
        """Stop the active run (it checkpoints), settle the queued ones, end the server."""
        if self.engine is not None:
            self.engine.shutdown(STOP_TIMEOUT_S)
        if self._runner is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread.is_alive():
            self._thread.join(30)
        with contextlib.suppress(RuntimeError):
            self._loop.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._log_level is not None:
            logging.getLogger("adapters_lib").setLevel(self._log_level)
            self._log_level = None
        if self._console is not None:
            logging.root.removeHandler(self._console)
            self._console = None

    def __enter__(self) -> EmbeddedEngine:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
