"""What process 0 tells every other process: commands, sent as ``command.to_json()``.

The engine's own API commands travel inside ``OnEveryProcess`` (with the folder of the run
they name, which every host sees at the same path); the others are the SPMD program's own
steps: ``Train`` (a run starts), ``Step`` (the stop decision before each training step),
``Heartbeat`` (while idle, so a dead leader is noticed) and ``Stop`` (the job ends).
``message_from_json`` reads any of them back, checked like an API request.
"""

from __future__ import annotations

from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError
from adapters_lib.jsontypes import record


@record
class Train(api.Command):
    """Train the run in ``run_dir`` (``stop``: process 0 does not start it: skip it too)."""

    name = "train"
    touches_devices = True
    run_dir: str = ""
    resume: bool = False
    stop: bool = False


@record
class Step(api.Command):
    """Process 0's decision before a training step: go on, or leave the loop now."""

    name = "step"
    touches_devices = True
    stop: bool = False


@record
class Heartbeat(api.Command):
    name = "heartbeat"
    time: float = 0.0


@record
class Stop(api.Command):
    """The job ends: every process exits cleanly."""

    name = "shutdown"


@record
class OnEveryProcess(api.Command):
    """An API command (``request``: its ``to_json()``) that every process runs, on the run in
    ``run_dir``: device work whose collectives or checkpoint barriers span the job."""

    name = "every_process"
    touches_devices = True
    request: dict[str, Any] | None = None
    run_dir: str = ""

    def api_command(self) -> api.Command:
        return api.command_from_json(self.request or {})


MESSAGES: dict[str, type[api.Command]] = {
    c.name: c for c in (Train, Step, Heartbeat, Stop, OnEveryProcess)}


def message_from_json(data: Any) -> api.Command:
    """A received message as its command (an unknown or malformed one is an error)."""
    if not isinstance(data, dict) or data.get("command") not in MESSAGES:
        raise WorkbenchError(f"multi-host: unexpected message {data!r:.200}")
    return api.parse_command(MESSAGES[data["command"]], data)
