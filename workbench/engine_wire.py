"""The engine API's wire format, client side: JSON bodies, error envelopes, server-sent events.

``EngineRequestError`` is a refused request (the engine's ``{"error": {"message", "where",
"hint"}}`` envelope, with the HTTP status); ``sse_events`` turns a response's lines into
``{"type", "data"}`` items; ``query_params`` writes a command's set values as a query string.
No JAX, no httpx client state: ``workbench.client`` does the connecting.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError


class EngineRequestError(WorkbenchError):
    """The engine refused a request (4xx/5xx): ``status`` is the HTTP status."""

    def __init__(self, message: str, *, status: int, where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.status = status


def request_error(response: httpx.Response, body: bytes) -> EngineRequestError:
    """The error of a refused response: its envelope, or its status line when it has none."""
    try:
        err = json.loads(body)["error"]
        return EngineRequestError(err.get("message") or response.reason_phrase,
                                  status=response.status_code, where=err.get("where"),
                                  hint=err.get("hint"))
    except (ValueError, KeyError, TypeError):
        return EngineRequestError(f"engine answered {response.status_code} "
                                  f"{response.reason_phrase}", status=response.status_code)


def json_content(body: Any, headers: dict[str, str]) -> bytes | None:
    """``body`` as the request's JSON content (setting its Content-Type), None without one."""
    if body is None:
        return None
    headers["Content-Type"] = "application/json"
    return json.dumps(body).encode()


def sse_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Server-sent events as ``{"type", "data"}`` (comments, the engine's pings, skipped)."""
    kind, data = "message", []
    for line in lines:
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


def query_params(cmd: api.Command) -> dict[str, Any]:
    """The command's set values (``payload``) as query parameters."""
    return {key: ("1" if value else "0") if isinstance(value, bool) else value
            for key, value in cmd.payload().items()}
