"""The engine client the TUI and the CLI use: httpx over the engine's Unix socket.

``EngineClient.connect()`` finds the engine through the runtime dir (socket + token file),
starting it detached (its own session, ``python -m adapters_lib.engine``) when no socket
answers, and waits until it is ready (``workbench.connect.connect()`` chooses between it
and a remote engine). Methods mirror the v1 API (docs/engine-api.md); a
refused request raises ``EngineRequestError`` (a ``WorkbenchError``) with the engine's
message, where and hint. The typed calls come from ``workbench.engine_calls.EngineCalls``
(this client supplies ``call`` and ``stream``): replies are the typed records of
``adapters_lib.engine.api`` (``status().jax.ready``, ``list_runs()[0].state``), streams
(``stream_run``, ``sample``, ``compare``) iterators of ``api.StreamItem`` (``.type``, typed
``.data``); closing one (or Ctrl-C) only detaches this client.

A remote engine (``--remote HOST``, ``workbench/remote``) is the same client over a socket
that ssh forwards here, with a ``link`` (``remote.RemoteLink``) that supplies the token and
restores the connection when it drops: requests go through ``link.call``, run streams through
``link.follow`` (resumed with ``since_step``). ``client.where`` names the engine's machine
(``"local"`` or the ssh destination); ``client.on_link(callback)`` hears the link's events.

This module never imports JAX: it is safe in the TUI process.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from adapters_lib.engine import api
from workbench.engine_calls import EngineCalls
from workbench.engine_process import (
    START_TIMEOUT_S,
    EngineNotRunning,
    _tail,
    engine_files,
    read_token,
    spawn_engine,
)
from workbench.engine_wire import (
    EngineRequestError,
    json_content,
    query_params,
    request_error,
    sse_events,
)


class Link(Protocol):
    """What the client needs of a link to a remote engine (``workbench.remote.RemoteLink``,
    whose reconnect policy is ``remote.resume.Reconnecting``)."""

    where: str
    token: str | None
    listeners: list[Callable[[Any], Any]]
    """Called with each ``remote.resume.LinkEvent``."""

    def call(self, send: Callable[[], httpx.Response], method: str, path: str) -> httpx.Response: ...

    def follow(self, open_stream: Callable[[int], Iterator[dict[str, Any]]],
               since_step: int) -> Iterator[dict[str, Any]]: ...

    def guard(self, open_stream: Callable[[], Iterator[dict[str, Any]]],
              what: str) -> Iterator[dict[str, Any]]: ...



class EngineClient(EngineCalls):
    """A connection to one engine. Thread-safe for independent calls (httpx.Client is)."""

    def __init__(self, *, socket_path: str | Path | None = None, token: str | None = None,
                 url: str | None = None, token_path: Path | None = None, timeout: float = 60.0,
                 link: Link | None = None):
        files = engine_files()
        self.link = link
        self.where = link.where if link is not None else "local"
        self.socket_path = None if url else Path(socket_path or files["socket"])
        self._token = token
        self._token_path = token_path or files["token"]
        self.url = url or "http://engine"
        transport = httpx.HTTPTransport(uds=str(self.socket_path)) if self.socket_path else None
        self._http = httpx.Client(base_url=self.url, transport=transport,
                                  timeout=httpx.Timeout(timeout, connect=5.0))

    # ----------------------------------------------------------------- connecting

    @classmethod
    def connect(cls, *, start: bool = True, timeout: float = START_TIMEOUT_S,
                **kwargs: Any) -> EngineClient:
        """A client of the engine on this machine; start one (detached) if none answers.
        (``workbench.connect.connect`` chooses between it and a remote engine.)"""
        client = cls(**kwargs)
        if client.ping():
            client.check_version()
            return client
        if not start:
            raise EngineNotRunning("the engine is not running",
                                   where=str(client.socket_path or client.url),
                                   hint="start it with `gemma-workbench engine start`")
        proc = spawn_engine()
        client.wait_ready(timeout, proc)
        client.check_version()
        return client

    def check_version(self) -> None:
        """Refuse an engine that speaks another API version (left over from an upgrade)."""
        got = self._request("GET", "/status").get("api_version")  # read untyped: any version
        if got != api.API_VERSION:
            raise EngineNotRunning(f"the running engine speaks API v{got}, this client v{api.API_VERSION}",
                                   hint="restart it: `gemma-workbench engine stop --force` "
                                        "(runs stay resumable), then try again")

    def ping(self) -> bool:
        """True when an engine answers on the socket with our token."""
        if self.socket_path is not None and not self.socket_path.exists():
            return False
        try:
            self._request("GET", "/status")
            return True
        except (httpx.TransportError, EngineNotRunning):
            return False
        except EngineRequestError as e:
            if e.status == 401:
                self._token = None  # a restarted engine has a new token: read it again
                return False
            raise

    def wait_ready(self, timeout: float = START_TIMEOUT_S,
                   proc: subprocess.Popen | None = None) -> float:
        """Poll until the engine answers; return the seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.ping():
                return time.monotonic() - t0
            if proc is not None and proc.poll() not in (None, 0, 3):
                break  # it died (3 = another engine holds the lock: keep waiting for that one)
            time.sleep(0.05)
        log = engine_files()["log"]
        code = proc.poll() if proc is not None else None
        if code not in (None, 0, 3):  # not "not ready in N s": it ended, after ~how long
            how = f"with status {code}" if code > 0 else f"on signal {-code}"
            raise EngineNotRunning(f"the engine exited {how} {time.monotonic() - t0:.0f} s after it "
                                   "was started", where=str(log), hint=f"see the engine log: {_tail(log)}")
        raise EngineNotRunning(f"the engine did not become ready in {timeout:.0f} s",
                               where=str(log), hint=f"see the engine log: {_tail(log)}")

    def close(self) -> None:
        self._http.close()

    def on_link(self, callback: Callable[[Any], Any]) -> None:
        """Call ``callback(event)`` when the link to a remote engine drops, reconnects, is back
        or gives up (from the thread that noticed; nothing happens for a local engine)."""
        if self.link is not None:
            self.link.listeners.append(callback)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ----------------------------------------------------------------- plumbing

    def _headers(self) -> dict[str, str]:
        if self.link is not None:
            return {"Authorization": f"Bearer {self.link.token}"}
        if self._token is None:
            self._token = read_token(self._token_path)
        return {"Authorization": f"Bearer {self._token}"}

    def _request(self, method: str, path: str, *, json_body: Any = None,
                 params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        def send() -> httpx.Response:
            headers = self._headers()
            kwargs: dict[str, Any] = {"headers": headers, "params": params,
                                      "content": json_content(json_body, headers)}
            if timeout is not None:
                kwargs["timeout"] = timeout
            return self._http.request(method, api.PREFIX + path, **kwargs)

        response = self.link.call(send, method, path) if self.link is not None else send()
        return self._result(response)

    @staticmethod
    def _result(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise request_error(response, response.content)
        return response.json()

    def _stream(self, method: str, path: str, *, json_body: Any = None,
                params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        headers = self._headers() | {"Accept": "text/event-stream"}
        content = json_content(json_body, headers)
        timeout = httpx.Timeout(60.0, connect=5.0)  # the engine pings every 10 s
        with self._http.stream(method, api.PREFIX + path, headers=headers, params=params,
                               content=content, timeout=timeout) as response:
            if response.status_code >= 400:
                raise request_error(response, response.read())
            yield from sse_events(response.iter_lines())

    # ----------------------------------------------------------------- typed calls

    def call(self, cmd: api.Command, *, timeout: float | None = None) -> Any:
        """Send one command; its typed reply (``cmd.reply.from_json`` of the answer)."""
        assert not cmd.streams and cmd.reply is not None, cmd.name
        data = self._send(cmd, timeout=timeout)
        return cmd.reply.from_json(data, where=f"{cmd.name} reply")

    def stream(self, cmd: api.Command) -> Iterator[api.StreamItem]:
        """Send a streaming command; its typed items (``api.StreamItem``) as they arrive.

        Over a remote link a run stream resumes after a dropped connection (``since_step``)
        and a generation stream is guarded (the link says what happened)."""
        assert cmd.streams, cmd.name

        def open_stream(c: api.Command) -> Iterator[dict[str, Any]]:
            method, _, source = c.route
            path = c.url()[len(api.PREFIX):]
            if source == "query":
                return self._stream(method, path, params=query_params(c))
            return self._stream(method, path, json_body=c.payload())

        if self.link is None:
            items = open_stream(cmd)
        elif isinstance(cmd, api.StreamRun):
            items = self.link.follow(lambda since: open_stream(cmd.replace(since_step=since)),
                                     cmd.since_step)
        else:
            items = self.link.guard(lambda: open_stream(cmd), cmd.name)
        for item in items:
            yield api.stream_item(item["type"], item["data"], cmd.items)

    def _send(self, cmd: api.Command, *, timeout: float | None = None) -> Any:
        method, _, source = cmd.route
        path = cmd.url()[len(api.PREFIX):]
        if source == "query":
            return self._request(method, path, params=query_params(cmd) or None, timeout=timeout)
        return self._request(method, path, json_body=cmd.payload(), timeout=timeout)
