"""Typed messages from the screens' thread workers to their screens.

A worker calls the engine (blocking, off the UI thread) and posts what it learned as one of
these (``post_message`` is thread-safe); the screen's ``on_<name>`` handler applies it on
the UI thread. Workers never query widgets or write app state themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from adapters_lib.engine import api


@dataclass
class EngineDevices(Message):
    """The engine's devices (and its catalog, for the adapter size) are known."""

    count: int
    kind: str
    catalog: dict[str, api.ModelInfo]
    """The catalog by model id."""


@dataclass
class EstimateDone(Message):
    """The engine's memory estimate of a config (``result``), or why there is none."""

    result: api.EstimateReply | None
    error: str = ""


@dataclass
class DataChecked(Message):
    """The data check's report, as markup for the Data page."""

    text: str


@dataclass
class RunLaunched(Message):
    """The engine created the run: show it on Train."""

    run_id: str
