"""The handler table: command type → the function that answers it.

A handler is ``fn(engine, cmd)`` and returns the command's reply (``cmd.reply``), a
``concurrent.futures.Future`` of it (device work: the server awaits it without holding a
thread), a ``GenerationStream`` (sample, compare) or the run to stream (``StreamRun``).
``Engine.execute`` looks the handler up by the command's type (never by its name) and
waits first for what the command declares it needs (``needs_jax``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters_lib.engine import api
from adapters_lib.engine.service import Handler

Emit = Callable[[str, dict[str, Any]], bool]

HANDLERS: dict[type[api.Command], Handler] = {}


def handles(*commands: type[api.Command]) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``commands``."""

    def register(fn: Handler) -> Handler:
        for cls in commands:
            if cls in HANDLERS:
                raise AssertionError(f"{cls.__name__} has two handlers")
            HANDLERS[cls] = fn
        return fn

    return register


@dataclass
class GenerationStream:
    """A checked generation request, not yet started: ``start(emit)`` queues it on the device
    thread and returns the future of its ``done`` data. ``emit(type, data)`` is called per
    piece from the device thread and returns False once the client is gone."""

    run: Any
    start: Callable[[Emit], concurrent.futures.Future]


def then(future: concurrent.futures.Future, fn: Callable[[Any], Any]) -> concurrent.futures.Future:
    """A future of ``fn(result)`` once ``future`` is done (its exception, if it fails)."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def done(f: concurrent.futures.Future) -> None:
        try:
            out.set_result(fn(f.result()))
        except BaseException as e:  # noqa: BLE001 - handed on
            out.set_exception(e)

    future.add_done_callback(done)
    return out
