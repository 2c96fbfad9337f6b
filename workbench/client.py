"""The engine client the TUI and the CLI use: httpx over the engine's Unix socket.

``EngineClient.connect()`` finds the engine through the runtime dir (socket + token file),
starting it detached (its own session, ``python -m adapters_lib.engine``) when no socket
answers, and waits until it is ready. Methods mirror the v1 API (docs/engine-api.md); a
refused request raises ``EngineRequestError`` (a ``WorkbenchError``) with the engine's
message, where and hint. Streams (``stream_run``, ``sample``, ``compare``) are iterators of
``{"type": ..., "data": {...}}``; closing one (or Ctrl-C) only detaches this client.

A remote engine (``--remote HOST``, ``workbench/remote``) is the same client over a socket
that ssh forwards here, with a ``link`` (``remote.RemoteLink``) that supplies the token and
restores the connection when it drops: requests go through ``link.call``, run streams through
``link.follow`` (resumed with ``since_step``). ``client.where`` names the engine's machine
(``"local"`` or the ssh destination); ``client.on_link(callback)`` hears the link's events.

This module never imports JAX: it is safe in the TUI process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from adapters_lib import paths
from adapters_lib.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.remote.link import LinkEvent, RemoteLink

API_VERSION = 1
API = f"/v{API_VERSION}"
START_TIMEOUT_S = 60.0


class EngineRequestError(WorkbenchError):
    """The engine refused a request (4xx/5xx): ``status`` is the HTTP status."""

    def __init__(self, message: str, *, status: int, where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.status = status


class EngineNotRunning(WorkbenchError):
    pass


def engine_files() -> dict[str, Path]:
    run = paths.runtime_dir()
    return {"socket": run / "engine.sock", "token": run / "engine.token",
            "pid": run / "engine.pid", "info": run / "engine.json",
            "log": paths.state_dir() / "engine.log"}


def read_token(path: Path | None = None) -> str:
    path = path or engine_files()["token"]
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise EngineNotRunning("the engine is not running (no token file)", where=str(path),
                               hint="start it with `gemma-workbench engine start`") from None


def spawn_engine(*, tcp: str | None = None, env: dict[str, str] | None = None,
                 on_demand: bool = True) -> subprocess.Popen:
    """Start ``python -m adapters_lib.engine`` detached: own session, no terminal, log to file.

    An engine started on demand (``on_demand``: by the TUI or a CLI command, not by
    ``engine start``) exits after ``GEMMA_WORKBENCH_ENGINE_IDLE_EXIT`` seconds (default 1800)
    with no run, no job and no client, so that it does not hold the accelerator forever.
    """
    log_path = engine_files()["log"]
    paths.ensure_private_dir(log_path.parent)
    cmd = [sys.executable, "-m", "adapters_lib.engine"]
    if on_demand:
        idle = os.environ.get("GEMMA_WORKBENCH_ENGINE_IDLE_EXIT", "1800")
        cmd += ["--idle-exit", idle]
    if tcp:
        cmd += ["--tcp", tcp]
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True,
                                env=env if env is not None else os.environ.copy())


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


class EngineClient:
    """A connection to one engine. Thread-safe for independent calls (httpx.Client is)."""

    def __init__(self, *, socket_path: str | Path | None = None, token: str | None = None,
                 url: str | None = None, token_path: Path | None = None, timeout: float = 60.0,
                 link: RemoteLink | None = None):
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
        """A client of the running engine; start one (detached) if none answers.

        With a remote engine selected (``--remote``, ``workbench.remote.select``) and no
        explicit socket/url: a client of that engine (started there if needed)."""
        if not kwargs:
            from workbench import remote

            spec = remote.selected()
            if spec is not None:
                return remote.connect(spec)
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
        got = self.status().get("api_version")
        if got != API_VERSION:
            raise EngineNotRunning(f"the running engine speaks API v{got}, this client v{API_VERSION}",
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
        raise EngineNotRunning(f"the engine did not become ready in {timeout:.0f} s",
                               where=str(log), hint=f"see the engine log: {_tail(log)}")

    def close(self) -> None:
        self._http.close()

    def on_link(self, callback: Callable[[LinkEvent], Any]) -> None:
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
            kwargs: dict[str, Any] = {"headers": self._headers(), "params": params}
            if json_body is not None:
                kwargs["content"] = json.dumps(json_body).encode()
                kwargs["headers"]["Content-Type"] = "application/json"
            if timeout is not None:
                kwargs["timeout"] = timeout
            return self._http.request(method, API + path, **kwargs)

        response = self.link.call(send, method, path) if self.link is not None else send()
        return self._result(response)

    @staticmethod
    def _error(response: httpx.Response, body: bytes) -> EngineRequestError:
        try:
            err = json.loads(body)["error"]
            return EngineRequestError(err.get("message") or response.reason_phrase,
                                      status=response.status_code, where=err.get("where"),
                                      hint=err.get("hint"))
        except (ValueError, KeyError, TypeError):
            return EngineRequestError(f"engine answered {response.status_code} "
                                      f"{response.reason_phrase}", status=response.status_code)

    def _result(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise self._error(response, response.content)
        return response.json()

    def _stream(self, method: str, path: str, *, json_body: Any = None,
                params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        headers = self._headers() | {"Accept": "text/event-stream"}
        content = None
        if json_body is not None:
            content = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        timeout = httpx.Timeout(60.0, connect=5.0)  # the engine pings every 10 s
        with self._http.stream(method, API + path, headers=headers, params=params,
                               content=content, timeout=timeout) as response:
            if response.status_code >= 400:
                raise self._error(response, response.read())
            kind, data = "message", []
            for line in response.iter_lines():
                if not line:
                    if data:
                        yield {"type": kind, "data": json.loads("\n".join(data))}
                    kind, data = "message", []
                elif line.startswith(":"):
                    continue
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())

    # ----------------------------------------------------------------- engine

    def status(self, *, wait: bool = False) -> dict[str, Any]:
        """Version, API version, JAX backend, devices, busy, active run (``wait``: for JAX)."""
        return self._request("GET", "/status", params={"wait": "1"} if wait else None,
                             timeout=300 if wait else None)

    def shutdown(self) -> dict[str, Any]:
        return self._request("POST", "/shutdown", json_body={})

    def models(self, folders: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
        params = {"folders": list(folders)} if folders else None
        return self._request("GET", "/models", params=params, timeout=300)["models"]

    def data_check(self, path: str = "", *, format: str = "auto", config: dict | None = None,
                   config_toml: str = "", limit: int = 0) -> dict[str, Any]:
        """The data report (``Report.to_dict()``: ok, fatal, counts, lengths, errors, ...).

        ``limit``: check at most this many records (0 = all) where the data area supports it.
        """
        body: dict[str, Any] = {"path": path, "format": format, "limit": limit}
        if config is not None:
            body["config"] = config
        if config_toml:
            body["config_toml"] = config_toml
        return self._request("POST", "/data/check", json_body=body, timeout=600)["report"]

    def estimate(self, config: dict | None = None, *, config_toml: str = "",
                 overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
        """``{"estimate", "summary", "trainable_params", "mesh_problems", "ok", ...}``."""
        body: dict[str, Any] = {"overrides": list(overrides)}
        if config is not None:
            body["config"] = config
        if config_toml:
            body["config_toml"] = config_toml
        return self._request("POST", "/estimate", json_body=body, timeout=600)

    # ----------------------------------------------------------------- runs

    def create_run(self, config: dict | None = None, *, config_toml: str = "",
                   overrides: list[str] | tuple[str, ...] = (), source: str = "") -> dict[str, Any]:
        """Queue a training run; returns its summary (``id``, ``state``, ``dir``, ...)."""
        body: dict[str, Any] = {"overrides": list(overrides), "source": source}
        if config is not None:
            body["config"] = config
        if config_toml:
            body["config_toml"] = config_toml
        return self._request("POST", "/runs", json_body=body)

    def list_runs(self) -> list[dict[str, Any]]:
        return self._request("GET", "/runs")["runs"]

    def get_run(self, run_id: str, *, metrics: bool = True, events: bool = True) -> dict[str, Any]:
        return self._request("GET", f"/runs/{run_id}",
                             params={"metrics": int(metrics), "events": int(events)})

    def stop_run(self, run_id: str) -> dict[str, Any]:
        return self._request("POST", f"/runs/{run_id}/stop", json_body={})

    def resume_run(self, run_id: str) -> dict[str, Any]:
        return self._request("POST", f"/runs/{run_id}/resume", json_body={})

    def delete_run(self, run_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/runs/{run_id}")

    def stream_run(self, run_id: str, since_step: int = 0) -> Iterator[dict[str, Any]]:
        """Metrics/events on disk with step > since_step, then live items until the run ends.

        Item types: ``metrics``, ``event``, ``log``, ``status``, ``replayed`` (the replay is
        over), ``end`` (the run reached a final state; the stream closes), ``error``.
        """
        def open_stream(since: int) -> Iterator[dict[str, Any]]:
            return self._stream("GET", f"/runs/{run_id}/stream", params={"since_step": since})

        if self.link is not None:
            return self.link.follow(open_stream, since_step)
        return open_stream(since_step)

    def wait_run(self, run_id: str, timeout: float = 600.0,
                 states: tuple[str, ...] = ("stopped", "completed", "failed", "interrupted"),
                 ) -> dict[str, Any]:
        """Poll until the run is in one of ``states``; return its summary."""
        t0 = time.monotonic()
        while True:
            run = self.get_run(run_id, metrics=False, events=False)
            if run["state"] in states:
                return run
            if time.monotonic() - t0 > timeout:
                raise WorkbenchError(f"run {run_id} still {run['state']} after {timeout:.0f} s")
            time.sleep(0.1)

    # ----------------------------------------------------------------- generation, export

    def sample(self, prompt: str, *, run_id: str = "", model: str = "demo", step: int = -1,
               max_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
               chat: bool = True) -> Iterator[dict[str, Any]]:
        """Streamed tokens: ``token`` items ({"text", "token", "done"}), then ``done``."""
        body = {"prompt": prompt, "run_id": run_id, "model": model, "step": step,
                "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "chat": chat}
        if self.link is not None:
            return self.link.guard(lambda: self._stream("POST", "/sample", json_body=body),
                                   "sample")
        return self._stream("POST", "/sample", json_body=body)

    def compare(self, prompt: str, run_id: str, *, step: int = -1, max_tokens: int = 128,
                temperature: float = 0.0, seed: int = 0,
                chat: bool = True) -> Iterator[dict[str, Any]]:
        """Base vs tuned: ``token`` items carry ``side`` ("base" or "tuned"), then ``done``."""
        body = {"prompt": prompt, "run_id": run_id, "step": step, "max_tokens": max_tokens,
                "temperature": temperature, "seed": seed, "chat": chat}
        if self.link is not None:
            return self.link.guard(lambda: self._stream("POST", "/compare", json_body=body),
                                   "compare")
        return self._stream("POST", "/compare", json_body=body)

    def export(self, run_id: str, *, kind: str = "adapter", out: str = "", step: int = -1,
               format: str = "", force: bool = False) -> dict[str, Any]:
        body = {"run_id": run_id, "kind": kind, "out": out, "step": step, "format": format}
        if force:  # only when asked: an older engine refuses the key
            body["force"] = True
        return self._request("POST", "/export", json_body=body, timeout=3600)


def connect(*, start: bool = True, timeout: float = START_TIMEOUT_S) -> EngineClient:
    """The client of this user's engine, starting the engine when needed."""
    return EngineClient.connect(start=start, timeout=timeout)


def submit_run(config_toml_text: str, overrides: list[str] | tuple[str, ...] = (),
               *, source: str = "<config>") -> str:
    """Queue a run on the engine (started if needed) and return its id (``train --detach``)."""
    with connect() as client:
        return client.create_run(config_toml=config_toml_text, overrides=overrides,
                                 source=source)["id"]
