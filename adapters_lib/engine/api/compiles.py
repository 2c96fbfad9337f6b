"""The compile queue's commands and replies: compile a config's programs ahead, and read
the queue's jobs.

- ``CompileAhead`` (``POST /compile/ahead``): queue the programs a config's run will need
  (its first train step, its eval steps) on the engine's one compile thread, so that a run
  launched later finds them compiled (``engine.compile_ahead``). A newer one drops the queued
  jobs of the older ones. On a CPU engine nothing compiles ahead (``ahead`` false, ``message``
  says why) unless ``force``.
- ``ListCompileJobs`` (``GET /compile/jobs``): the jobs (``what``, ``about``, ``state``:
  queued / compiling / ready / failed / dropped, ``seconds``) and the latest compile-ahead.

Registered in ``COMMANDS`` on import (``adapters_lib.engine.api`` imports this module).
JSON keys are a contract: added to, never renamed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters_lib.engine.api.commands import COMMANDS, Command, Route
from adapters_lib.jsontypes import Record, record

__all__ = ["CompileJobInfo", "CompileRequestInfo", "CompileAheadReply", "CompileJobs", "CompileAhead",
           "ListCompileJobs", "JOB_STATES", "REQUEST_STATES"]

JOB_STATES = ("queued", "compiling", "ready", "failed", "dropped")
REQUEST_STATES = ("deferred", "planning", "planned", "failed", "superseded")
"""A compile-ahead: waiting for the running run to end, setting up (model, data, steps) on the
device thread, its jobs queued (``planned``: read their states), failed, or replaced by a newer one."""


@record
class CompileJobInfo(Record):
    """One job of the compile queue (``train.compile_queue.CompileJob.to_json``)."""

    id: int = 0
    what: str = ""
    """"train step", "eval step", "sampler prefill", …"""
    about: str = ""
    """For which config or run, in words."""
    purpose: str = ""
    request: int = 0
    """The compile-ahead it serves (0: none, e.g. a run's own compile behind)."""
    where: str = "behind"
    """"behind" (the compile thread) or "foreground" (a step compiles it, or waits for it)."""
    state: str = "queued"
    queued_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    seconds: float | None = None
    """Compiling so far, or how long it took; None before it started."""
    error: str = ""


@record
class CompileRequestInfo(Record):
    """A compile-ahead request and where it is (``REQUEST_STATES``)."""

    request: int = 0
    state: str = "planning"
    about: str = ""
    message: str = ""
    since: float | None = None
    """When it entered its state (epoch seconds)."""


@record
class CompileAheadReply(Record):
    ahead: bool = False
    """Whether this engine compiles ahead (false: a CPU engine, or turned off; see ``message``)."""
    backend: str = ""
    message: str = ""
    request: CompileRequestInfo | None = None
    """The request made (None when nothing compiles ahead)."""


@record
class CompileJobs(Record):
    ahead: bool = False
    """Whether this engine compiles ahead without being forced (false on a CPU)."""
    backend: str = ""
    message: str = ""
    latest: CompileRequestInfo | None = None
    """The newest compile-ahead (the next run's), if any."""
    jobs: list[CompileJobInfo] = dataclasses.field(default_factory=list)


@record
class CompileAhead(Command):
    name = "compile_ahead"
    route = Route("POST", "/compile/ahead")
    slow = True
    """It waits for the engine's devices (a cold engine) before it answers."""
    reply = CompileAheadReply
    config: dict[str, Any] | None = None
    config_toml: str = ""
    overrides: tuple[str, ...] = ()
    source: str = ""
    """Where the config came from (a file path), for error messages."""
    force: bool = False
    """Compile ahead on a CPU too (there a compile takes the cores the steps need)."""


@record
class ListCompileJobs(Command):
    name = "compile_jobs"
    route = Route("GET", "/compile/jobs", "query")
    reply = CompileJobs
    request: int = 0
    """Only this compile-ahead's jobs (0: every job)."""


COMMANDS.update({c.name: c for c in (CompileAhead, ListCompileJobs)})
