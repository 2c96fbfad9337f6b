"""The engine client the TUI and the CLI use: httpx over the engine's Unix socket.

``EngineClient.connect()`` finds the engine through the runtime dir (socket + token file),
starting it detached (its own session, ``python -m adapters_lib.engine``) when no socket
answers, and waits until it is ready (``workbench.connect.connect()`` chooses between it
and a remote engine). Methods mirror the v1 API (docs/engine-api.md); a
refused request raises ``EngineRequestError`` (a ``WorkbenchError``) with the engine's
message, where and hint. Replies are the typed records of ``adapters_lib.engine.api``
(``status().jax.ready``, ``list_runs()[0].state``); for a transition they also read like the
dicts they replace (``reply["state"]``). Streams (``stream_run``, ``sample``, ``compare``) are
iterators of ``api.StreamItem`` (``.type``, typed ``.data``); closing one (or Ctrl-C) only
detaches this client.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.runs.state import TERMINAL_STATES, RunState
from workbench.engine_process import (  # noqa: F401  (part of this module's interface)
    START_TIMEOUT_S,
    EngineNotRunning,
    _tail,
    engine_files,
    read_token,
    spawn_engine,
)
from workbench.engine_wire import (  # noqa: F401  (EngineRequestError: part of this interface)
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

API_VERSION = api.API_VERSION
API = api.PREFIX


class EngineClient:
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
            return self._http.request(method, API + path, **kwargs)

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
        with self._http.stream(method, API + path, headers=headers, params=params,
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

    # ----------------------------------------------------------------- engine

    def status(self, *, wait: bool = False) -> api.EngineStatus:
        """Version, API version, JAX state, devices, health, busy, active run (``wait``: JAX)."""
        return self.call(api.Status(wait=wait), timeout=300 if wait else None)

    def shutdown(self) -> api.ShutdownReply:
        return self.call(api.Shutdown())

    def models(self, folders: list[str] | tuple[str, ...] = ()) -> list[api.ModelInfo]:
        return self.call(api.ListModels(folders=tuple(folders)), timeout=300).models

    def data_check(self, path: str = "", *, format: str = "auto", config: dict | None = None,
                   config_toml: str = "", limit: int = 0) -> api.DataReport:
        """The data report (``Report.to_dict()``: ok, fatal, counts, lengths, errors, ...).

        ``limit``: check at most this many records (0 = all) where the data area supports it.
        """
        cmd = api.CheckData(path=path, format=format, config=config, config_toml=config_toml,
                            limit=limit)
        return self.call(cmd, timeout=600).report

    def estimate(self, config: dict | None = None, *, config_toml: str = "",
                 overrides: list[str] | tuple[str, ...] = ()) -> api.EstimateReply:
        """Memory per device, trainable params, mesh problems (``ok``: none is an error)."""
        cmd = api.Estimate(config=config, config_toml=config_toml, overrides=tuple(overrides))
        return self.call(cmd, timeout=600)

    # ----------------------------------------------------------------- runs

    def create_run(self, config: dict | None = None, *, config_toml: str = "",
                   overrides: list[str] | tuple[str, ...] = (), source: str = "") -> api.RunSummary:
        """Queue a training run; returns its summary (``id``, ``state``, ``dir``, ...)."""
        return self.call(api.CreateRun(config=config, config_toml=config_toml,
                                       overrides=tuple(overrides), source=source))

    def list_runs(self) -> list[api.RunSummary]:
        return self.call(api.ListRuns()).runs

    def get_run(self, run_id: str, *, metrics: bool = True, events: bool = True) -> api.RunDetail:
        return self.call(api.GetRun(run_id=run_id, metrics=metrics, events=events))

    def list_sweeps(self) -> list[api.SweepInfo]:
        """Every sweep the engine's runs belong to (#20), newest first."""
        return self.call(api.ListSweeps()).sweeps

    def get_sweep(self, sweep_id: str, *, metric: str = "") -> api.SweepResults:
        """A sweep's results table (``runs sweep ID --json``; contract)."""
        return self.call(api.GetSweep(sweep_id=sweep_id, metric=metric))

    def eval_checkpoints(self, run_id: str, *, data: str = "", metrics: list[str] | tuple[str, ...] = (),
                         batch_size: int = 4) -> api.EvalTable:
        """The base and every checkpoint of a run scored (``eval --all-checkpoints``)."""
        return self.call(api.EvalCheckpoints(run_id=run_id, data=data, metrics=tuple(metrics),
                                             batch_size=batch_size), timeout=3600)

    def stop_run(self, run_id: str) -> api.RunSummary:
        return self.call(api.StopRun(run_id=run_id))

    def resume_run(self, run_id: str) -> api.RunSummary:
        return self.call(api.ResumeRun(run_id=run_id))

    def delete_run(self, run_id: str) -> api.DeleteReply:
        return self.call(api.DeleteRun(run_id=run_id))

    def stream_run(self, run_id: str, since_step: int = 0) -> Iterator[api.StreamItem]:
        """Metrics/events on disk with step > since_step, then live items until the run ends.

        Item types: ``metrics``, ``event``, ``log``, ``status``, ``replayed`` (the replay is
        over), ``end`` (the run reached a final state; the stream closes), ``error``.
        """
        return self.stream(api.StreamRun(run_id=run_id, since_step=since_step))

    def wait_run(self, run_id: str, timeout: float = 600.0,
                 states: tuple[RunState, ...] = TERMINAL_STATES,
                 ) -> api.RunDetail:
        """Poll until the run is in one of ``states``; return its summary."""
        t0 = time.monotonic()
        while True:
            run = self.get_run(run_id, metrics=False, events=False)
            if run.state in states:
                return run
            if time.monotonic() - t0 > timeout:
                raise WorkbenchError(f"run {run_id} still {run.state} after {timeout:.0f} s")
            time.sleep(0.1)

    # ----------------------------------------------------------------- generation, export

    def sample(self, prompt: str = "", *, run_id: str = "", model: str = "demo", step: int = -1,
               max_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
               chat: bool = True, top_k: int = 0, top_p: float = 1.0,
               messages: Sequence[Mapping[str, Any]] = (), system: str = "",
               adapter: str = "", quantize: str = "") -> Iterator[api.StreamItem]:
        """Streamed tokens: ``token`` items (``api.TokenChunk``), then ``done`` (``SampleDone``:
        text, tokens, tokens_per_s, stop_reason). ``messages``: a conversation instead of
        ``prompt`` (the model answers its last user turn)."""
        return self.stream(api.Sample(prompt=prompt, run_id=run_id, model=model, step=step,
                                      max_tokens=max_tokens, temperature=temperature,
                                      seed=seed, chat=chat, top_k=top_k, top_p=top_p,
                                      messages=_chat(messages), system=system, adapter=adapter,
                                      quantize=quantize))

    def compare(self, prompt: str = "", run_id: str = "", *, step: int = -1, max_tokens: int = 128,
                temperature: float = 0.0, seed: int = 0, chat: bool = True, top_k: int = 0,
                top_p: float = 1.0, messages: Sequence[Mapping[str, Any]] = (), system: str = "",
                adapter: str = "", model: str = "", save: bool = False) -> Iterator[api.StreamItem]:
        """Base vs tuned: ``token`` items carry ``side`` ("base"/"tuned"), then ``done``
        (``CompareDone``: per side tokens, tokens_per_s, stop_reason).

        ``messages`` (multi-turn A/B): the conversation so far; every user turn without an
        answer is answered, each side with its own history. Send earlier answers back as
        ``{"role": "assistant", "base": ..., "tuned": ...}``; token items then carry ``turn``
        and the done reply has ``turns``. ``save``: keep the result in ``<run>/compare/``
        (the done reply's ``saved`` names the file)."""
        return self.stream(api.Compare(prompt=prompt, run_id=run_id, step=step,
                                       max_tokens=max_tokens, temperature=temperature,
                                       seed=seed, chat=chat, top_k=top_k, top_p=top_p,
                                       messages=_chat(messages), system=system, adapter=adapter,
                                       model=model, save=save))

    def compare_set(self, entries: Sequence[Mapping[str, Any]], *, run_id: str = "", adapter: str = "",
                    model: str = "", step: int = -1, max_tokens: int = 128, temperature: float = 0.0,
                    top_k: int = 0, top_p: float = 1.0, seed: int = 0, chat: bool = True,
                    save: bool = True, quantize: str = "") -> Iterator[api.StreamItem]:
        """A compare set (``{"prompt"}`` or ``{"messages"}`` entries) in one stream: ``token``
        items carry ``row``/``turn``/``side``; ``done`` (``CompareSetDone``) has the results
        and the saved file."""
        items = tuple(api.CompareItem(prompt=e.get("prompt", ""), messages=_chat(e.get("messages") or ()),
                                      system=e.get("system", "")) for e in entries)
        return self.stream(api.CompareSet(run_id=run_id, adapter=adapter, model=model, step=step,
                                          entries=items, max_tokens=max_tokens,
                                          temperature=temperature, top_k=top_k, top_p=top_p,
                                          seed=seed, chat=chat, save=save, quantize=quantize))

    def eval(self, data: str, *, model: str = "", run_id: str = "", step: int = -1,
             format: str = "auto", loss_on: str = "model", max_length: int = 0,
             batch_size: int = 4, quantize: str = "") -> api.EvalResult:
        """Loss, perplexity and scored tokens on ``data`` (an absolute path on the engine's machine)."""
        return self.call(api.Eval(data=data, model=model, run_id=run_id, step=step, format=format,
                                  loss_on=loss_on, max_length=max_length, batch_size=batch_size,
                                  quantize=quantize),
                         timeout=3600)

    def export(self, run_id: str, *, kind: str = "", out: str = "", step: int = -1,
               format: str = "", force: bool = False, quant: str = "") -> api.ExportReply:
        """``format``: "adapter", "gemma", "hf", "gguf" or "gguf-lora" (``api.EXPORT_FORMATS``);
        ``kind`` is the older "adapter"/"merged" (alone, "merged" is "gemma"); ``quant``: the
        GGUF formats' type."""
        return self.call(api.Export(run_id=run_id, kind=kind, out=out, step=step, format=format,
                                    force=force, quant=quant), timeout=3600)


def _chat(messages: Sequence[Mapping[str, Any]]) -> tuple[api.ChatMessage, ...]:
    return tuple(m if isinstance(m, api.ChatMessage) else api.ChatMessage.from_json(dict(m), key="messages")
                 for m in messages)
