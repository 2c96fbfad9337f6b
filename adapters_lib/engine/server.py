"""The HTTP/JSON API (v1) over the engine's Unix socket (TCP only on explicit request).

Every request carries ``Authorization: Bearer <token>`` (401 otherwise, compared in constant
time). Bodies are JSON objects of at most ``MAX_BODY`` bytes (413 beyond), parsed into a
command (``commands.parse_command``, 400 with ``{"error": {"message","where","hint"}}`` when
malformed) and executed off the event loop. Streams are server-sent events. The routes are
documented in docs/engine-api.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

from aiohttp import web

from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.service import Engine
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine.server")

MAX_BODY = 1024 * 1024
PING_S = float(os.environ.get("GEMMA_WORKBENCH_SSE_PING_S", "10"))
ENGINE_KEY = web.AppKey("engine", Engine)
TOKEN_KEY = web.AppKey("token", str)
STOP_KEY = web.AppKey("stop", asyncio.Event)
WORK_POOL_KEY = web.AppKey("work_pool", concurrent.futures.ThreadPoolExecutor)
WORK_THREADS = 4
STREAM_PATHS = frozenset(api.PREFIX + c.route.path for c in api.COMMANDS.values()
                         if c.streams and "{" not in c.route.path)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _now() -> float:
    return time.monotonic()


def error_response(status: int, message: str, where: str | None = None,
                   hint: str | None = None) -> web.Response:
    body = {"error": {"message": message, "where": where, "hint": hint, "status": status}}
    return web.json_response(body, status=status)


@web.middleware
async def auth_and_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[TOKEN_KEY]
    given = request.headers.get("Authorization", "")
    expected = f"Bearer {token}"
    if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
        what = "missing" if not given else "wrong"
        return error_response(401, f"{what} engine token", where=request.path,
                              hint="send Authorization: Bearer <token from the engine's token file>")
    engine = request.app[ENGINE_KEY]
    engine.last_activity = _now()
    length = request.content_length
    if length is not None and length > MAX_BODY:
        return error_response(413, f"request body too large ({length} > {MAX_BODY} bytes)",
                              where=request.path)
    try:
        if request.path.endswith("/stream") or request.path in STREAM_PATHS:
            engine.open_streams += 1
            try:
                return await handler(request)
            finally:
                engine.open_streams -= 1
                engine.last_activity = _now()
        return await handler(request)
    except EngineError as e:
        return error_response(e.status, e.message, e.where, e.hint)
    except WorkbenchError as e:
        return error_response(400, e.message, e.where, e.hint)
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, f"request body too large (limit {MAX_BODY} bytes)",
                              where=request.path)
    except web.HTTPException as e:
        if e.status >= 400:
            return error_response(e.status, e.reason, where=request.path)
        raise
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as e:
        log.exception("request %s %s failed", request.method, request.path)
        return error_response(500, f"internal error: {type(e).__name__}: {e}",
                              where=request.path, hint="see the engine log")


async def _body(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    raw = await request.read()  # bounded by client_max_size → 413
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except RecursionError:  # nested deeper than the parser goes
        raise WorkbenchError("the body is nested too deeply", where=request.path,
                             hint="send a flat JSON object (see docs/engine-api.md)") from None
    except ValueError as e:  # not JSON, not UTF-8, or an integer of thousands of digits
        raise WorkbenchError(f"the body is not valid JSON ({_first_line(e)})", where=request.path,
                             hint="send a JSON object with Content-Type: application/json") from None


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _query(request: web.Request, cls: type[api.Command]) -> dict[str, Any]:
    """Query parameters typed for ``cls`` (``?metrics=0&since_step=5``)."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key in request.query:
        if key not in names:
            out[key] = request.query[key]  # parse_command refuses it with a hint
            continue
        values = request.query.getall(key)
        typ = hints[key]
        text = values[-1]
        if typ is bool:
            if text.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise WorkbenchError(f"{key} must be true or false", where=request.path)
            out[key] = text.lower() in ("1", "true", "yes")
        elif typ is int:
            try:
                out[key] = int(text)
            except ValueError:
                raise WorkbenchError(f"{key} must be an integer", where=request.path) from None
        elif str(typ).startswith("tuple"):
            out[key] = list(values)
        else:
            out[key] = text
    return out


async def execute(request: web.Request, cmd: api.Command) -> Any:
    """``engine.execute(cmd)`` off the event loop: quick commands in the loop's default pool,
    slow ones (``cmd.slow``, ``needs_jax``) in a pool of their own, so status and runs never wait behind a
    catalog scan or a model load. Device work comes back as a future, awaited here: no
    thread waits while a generation or an export runs."""
    engine = request.app[ENGINE_KEY]
    loop = asyncio.get_running_loop()
    # status?wait=1 and every needs_jax command (a new area's too) may wait for JAX start-up
    slow = cmd.slow or cmd.needs_jax or bool(getattr(cmd, "wait", False))
    pool = request.app[WORK_POOL_KEY] if slow else None
    result = await loop.run_in_executor(pool, engine.execute, cmd)
    if isinstance(result, concurrent.futures.Future):
        result = await asyncio.wrap_future(result)
    return result


async def _run(request: web.Request, cmd: api.Command) -> web.Response:
    result = await execute(request, cmd)
    return web.json_response(api.to_jsonable(result), dumps=_dumps)


def _dumps(data: Any) -> str:
    return json.dumps(data, allow_nan=True, default=str)


def route(cls: type[api.Command], source: str = "body", **path_params: str) -> Handler:
    """A handler that parses ``cls`` from the body (or the query) plus path params, runs it."""

    async def handler(request: web.Request) -> web.Response:
        raw = await _body(request) if source == "body" else _query(request, cls)
        values = {field: request.match_info[name] for field, name in path_params.items()}
        cmd = api.parse_command(cls, raw, **values)
        if isinstance(cmd, api.StreamRun):
            return await stream_run(request, cmd)
        if cmd.streams:
            return await stream_generation(request, cmd)
        return await _run(request, cmd)

    return handler


# --------------------------------------------------------------------------- SSE


class EventStream:
    def __init__(self, request: web.Request):
        self.request = request
        self.response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no"})

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, kind: str, data: Any) -> None:
        data = api.to_jsonable(data)
        await self.response.write(f"event: {kind}\ndata: {_dumps(data)}\n\n".encode())

    async def ping(self) -> None:
        await self.response.write(b": ping\n\n")


async def stream_run(request: web.Request, cmd: api.StreamRun) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    run = await execute(request, cmd)  # logs it, finds the run
    sub = engine.hub.subscribe(run.run_id)
    stream = EventStream(request)
    try:
        await stream.open()
        replay = await asyncio.to_thread(engine.replay, run, cmd.since_step)
        # Items published between subscribing and reading the files arrive twice: drop
        # live items equal to one replayed (a re-run step after a resume differs in time).
        seen = {(i["type"], _dumps(i["data"])) for i in replay}
        last_step = cmd.since_step
        for item in replay:
            await stream.send(item["type"], item["data"])
            if item["type"] == "metrics":
                last_step = max(last_step, int(item["data"].get("step", 0)))
        summary = await asyncio.to_thread(engine.summary, run)
        await stream.send("replayed", {"step": last_step})
        await stream.send("status", summary)
        last_status = (summary.state, summary.step)
        if not summary.active:
            await stream.send("end", {"state": summary.state})
            return stream.response
        while True:
            try:
                item = await asyncio.wait_for(sub.get(), PING_S)
            except TimeoutError:
                await stream.ping()
                continue
            kind, data = item["type"], item["data"]
            if kind == "overflow":
                await stream.send("error", {"message": "the client fell behind; reconnect "
                                            "with since_step", "step": last_step})
                break
            if kind == "status":  # the loop's state event and the engine may both say it
                key = (data.get("state"), data.get("step"))
                if key == last_status:
                    continue
                last_status = key
            if kind in ("metrics", "event") and seen:
                key = (kind, _dumps(data))
                if key in seen:
                    seen.discard(key)
                    continue
            await stream.send(kind, data)
            if kind == "end":
                break
    except (ConnectionResetError, asyncio.CancelledError):
        log.debug("stream of run %s: client went away", run.run_id)
    finally:
        sub.close()
    return stream.response


async def stream_generation(request: web.Request, cmd: api.Command) -> web.StreamResponse:
    """A generation (sample, compare, ...): the handler checks it (errors are the HTTP status),
    the device thread runs it, each piece is sent as it comes; the future of its ``done``
    data is awaited on the event loop."""
    generation = await execute(request, cmd)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
    gone = asyncio.Event()

    def emit(kind: str, data: dict[str, Any]) -> bool:  # device thread
        if gone.is_set():
            return False
        loop.call_soon_threadsafe(queue.put_nowait, (kind, data))
        return True

    stream = EventStream(request)
    task = asyncio.wrap_future(generation.start(emit))
    try:
        await stream.open()
        getter: asyncio.Future | None = None
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, task}, timeout=PING_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                kind, data = getter.result()
                await stream.send(kind, data)
                continue
            getter.cancel()
            if task in done:
                while not queue.empty():
                    kind, data = queue.get_nowait()
                    await stream.send(kind, data)
                exc = task.exception()
                if exc is not None:
                    err = exc if isinstance(exc, WorkbenchError) else None
                    if err is None:
                        log.error("%s failed", cmd.name, exc_info=exc)
                    await stream.send("error", {
                        "message": err.message if err else f"{type(exc).__name__}: {exc}",
                        "where": err.where if err else None, "hint": err.hint if err else None})
                else:
                    await stream.send("done", task.result() or {})
                break
            await stream.ping()
    except (ConnectionResetError, asyncio.CancelledError):
        log.info("%s: client went away; generation stops", cmd.name)
    finally:
        gone.set()
    return stream.response


async def shutdown(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    result = engine.execute(api.parse_command(api.Shutdown, await _body(request)))
    request.app[STOP_KEY].set()
    return web.json_response(api.to_jsonable(result))


async def not_found(request: web.Request) -> web.Response:
    raise EngineError(f"no route {request.method} {request.path}", status=404,
                      hint="see docs/engine-api.md")


async def _close_pool(app: web.Application) -> None:
    app[WORK_POOL_KEY].shutdown(wait=False, cancel_futures=True)


def _path_fields(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def make_app(engine: Engine, token: str) -> web.Application:
    app = web.Application(middlewares=[auth_and_errors], client_max_size=MAX_BODY)
    app[ENGINE_KEY] = engine
    app[TOKEN_KEY] = token
    app[STOP_KEY] = asyncio.Event()
    app[WORK_POOL_KEY] = concurrent.futures.ThreadPoolExecutor(
        max_workers=WORK_THREADS, thread_name_prefix="engine-work")
    app.on_cleanup.append(_close_pool)
    special = {api.Shutdown: shutdown}
    for cls in api.COMMANDS.values():
        method, path, source = cls.route
        handler = special.get(cls) or route(cls, source, **{f: f for f in _path_fields(path)})
        app.router.add_route(method, api.PREFIX + path, handler)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
