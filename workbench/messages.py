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


@dataclass
class RunChosen(Message):
    """A run to show (Train: the newest active run, found for the user)."""

    run_id: str


@dataclass
class RunRecord(Message):
    """A run's record from the engine (``get_run``): everything on disk so far."""

    run_id: str
    record: api.RunDetail


@dataclass
class RunStreamed(Message):
    """One item of a run's live stream (``stream_run``)."""

    run_id: str
    item: api.StreamItem


@dataclass
class RunStatusRead(Message):
    """A run's status after an action (stop, resume)."""

    run_id: str
    status: api.RunSummary


@dataclass
class EngineStatusRead(Message):
    """The engine's status (device memory, JAX start-up)."""

    status: api.EngineStatus


@dataclass
class RunsListed(Message):
    """The run list, the configs of the runs not seen before, and the request's number (a
    reply older than the one shown is dropped)."""

    runs: list[api.RunSummary]
    configs: dict[str, dict]
    seq: int


@dataclass
class CurvesRead(Message):
    """The marked runs' records (their loss curves and configs), for the overlay."""

    records: dict[str, api.RunDetail]
    seq: int


@dataclass
class RunActionDone(Message):
    """A run action (stop, resume, export, delete) is done: its reply, or None (it failed and
    the failure was notified)."""

    name: str
    run_id: str
    reply: object | None


@dataclass
class CompileJobsRead(Message):
    """The next run's programs, compiled ahead: the engine's compile jobs, or why none
    (``message``: the request failed or the engine does not know the command)."""

    jobs: api.CompileJobs | None
    message: str = ""
