"""The commands of the engine's API (v1): one frozen dataclass per thing a client can ask.

Every request goes through a command: the server parses JSON into one with
``parse_command`` (validated, unknown keys refused with the closest valid one), the engine's
handler table dispatches it by type, the engine log records it, and a multi-host leader
broadcasts its ``to_json()``. No pickle: commands travel as JSON objects only.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, ClassVar, NamedTuple

from adapters_lib.engine.api.replies import (
    PREFIX,
    DataCheckReply,
    DeleteReply,
    EngineStatus,
    EstimateReply,
    ExportReply,
    ModelList,
    RunDetail,
    RunList,
    RunSummary,
    ShutdownReply,
)
from adapters_lib.engine.api.streams import RUN_STREAM_ITEMS
from adapters_lib.errors import WorkbenchError
from adapters_lib.export.formats import FORMATS as EXPORT_FORMATS
from adapters_lib.jsontypes import Record, coerce, record, type_hints

TOKEN_LIMIT_ALIASES = {"max_tokens": "max_new_tokens"}
"""The generation commands' older name of the token limit (the API is a contract: extended)."""
LIMITS = {"prompt": 64 * 1024, "config_toml": 256 * 1024, "max_new_tokens": 8192}
"""Upper bounds of request values (string length, or the integer itself)."""

__all__ = [
    "Route",
    "Command",
    "Status",
    "Shutdown",
    "ListModels",
    "CheckData",
    "Estimate",
    "CreateRun",
    "ListRuns",
    "GetRun",
    "StopRun",
    "ResumeRun",
    "DeleteRun",
    "StreamRun",
    "Export",
    "EXPORT_FORMATS",
    "LIMITS",
    "COMMANDS",
    "parse_command",
    "command_from_json",
]



# =========================================================================== commands


class Route(NamedTuple):
    method: str
    path: str
    """Under ``PREFIX``; ``{field}`` parts come from the command's fields."""
    source: str = "body"
    """Where the other values travel: "body" (a JSON object) or "query"."""



@record
class Command(Record):
    """One request. Plain data: logged, replayed, broadcast to every host (``to_json``)."""

    OPEN = False
    name: ClassVar[str] = ""
    route: ClassVar[Route] = None  # type: ignore[assignment]
    needs_jax: ClassVar[bool] = False
    """Wait for JAX and the heavy modules (False: metadata; answered on a cold engine)."""
    touches_devices: ClassVar[bool] = False
    """Runs device code (multi-host: every process runs it)."""
    streams: ClassVar[bool] = False
    slow: ClassVar[bool] = False
    """May take seconds (a catalog scan, a data check, loading a model): the server runs it
    in a pool of its own, so that status and run requests never wait behind it."""
    reply: ClassVar[type[Record] | None] = None
    ALIASES: ClassVar[dict[str, str]] = {}
    """Older key → its field: a request may still use the older key (one of the two)."""
    items: ClassVar[dict[str, type[Record] | None]] = {}
    """For a stream: its item types."""

    def to_json(self) -> dict[str, Any]:
        return {"command": self.name, **super().to_json()}

    def path_fields(self) -> tuple[str, ...]:
        return tuple(f for f in _fields_of(type(self)) if "{" + f + "}" in self.route.path)

    def url(self) -> str:
        return PREFIX + self.route.path.format(**{f: getattr(self, f) for f in self.path_fields()})

    def payload(self) -> dict[str, Any]:
        """The values that travel in the body or query: those not in the path and not at
        their default (so a key added to a command never reaches an older engine unless
        it is used)."""
        data = Record.to_json(self)
        defaults = Record.to_json(type(self)(**{f: getattr(self, f) for f in self.path_fields()}))
        return {k: v for k, v in data.items()
                if k not in self.path_fields() and v != defaults.get(k)}


def _fields_of(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]


# --------------------------------------------------------------------------- engine


@record
class Status(Command):
    name = "status"
    route = Route("GET", "/status", "query")
    reply = EngineStatus
    wait: bool = False
    """Wait until JAX is imported and the devices are known."""


@record
class Shutdown(Command):
    name = "shutdown"
    route = Route("POST", "/shutdown")
    reply = ShutdownReply


# --------------------------------------------------------------------------- metadata, compute


@record
class ListModels(Command):
    name = "models"
    route = Route("GET", "/models", "query")
    slow = True
    reply = ModelList
    folders: tuple[str, ...] = ()
    """Extra folders to search for weights, besides the configured ones."""


@record
class CheckData(Command):
    name = "data_check"
    route = Route("POST", "/data/check")
    slow = True
    reply = DataCheckReply
    path: str = ""
    """The data file or folder."""
    format: str = "auto"
    config: dict[str, Any] | None = None
    """A run config (dict) whose [data]/[model] sections give the check its settings."""
    config_toml: str = ""
    limit: int = 0
    """Check at most this many records, where the data area supports it (0 = all)."""


@record
class Estimate(Command):
    name = "estimate"
    route = Route("POST", "/estimate")
    slow = True
    needs_jax = True
    reply = EstimateReply
    config: dict[str, Any] | None = None
    config_toml: str = ""
    overrides: tuple[str, ...] = ()
    source: str = ""
    """Where the config came from (a file path), for error messages."""
    device: str = ""
    """Plan for a chip by name (``v5e``, ``TPU v5 lite``, ``h100``: ``memory.device``) instead of
    the engine's own devices (additive)."""


# --------------------------------------------------------------------------- runs


@record
class CreateRun(Command):
    name = "create_run"
    route = Route("POST", "/runs")
    touches_devices = True
    reply = RunSummary
    config: dict[str, Any] | None = None
    config_toml: str = ""
    overrides: tuple[str, ...] = ()
    source: str = ""
    """Where the config came from (a file path), for error messages."""


@record
class ListRuns(Command):
    name = "list_runs"
    route = Route("GET", "/runs", "query")
    reply = RunList


@record
class GetRun(Command):
    name = "get_run"
    route = Route("GET", "/runs/{run_id}", "query")
    reply = RunDetail
    run_id: str = ""
    metrics: bool = True
    events: bool = True


@record
class StopRun(Command):
    name = "stop_run"
    route = Route("POST", "/runs/{run_id}/stop")
    reply = RunSummary
    run_id: str = ""


@record
class ResumeRun(Command):
    name = "resume_run"
    route = Route("POST", "/runs/{run_id}/resume")
    touches_devices = True
    reply = RunSummary
    run_id: str = ""


@record
class DeleteRun(Command):
    name = "delete_run"
    route = Route("DELETE", "/runs/{run_id}", "query")
    reply = DeleteReply
    run_id: str = ""


@record
class StreamRun(Command):
    name = "stream_run"
    route = Route("GET", "/runs/{run_id}/stream", "query")
    streams = True
    items = RUN_STREAM_ITEMS
    run_id: str = ""
    since_step: int = 0
    """Replay metrics with step > since_step (0 = everything), then follow live."""


# --------------------------------------------------------------------------- export (generation: generation.py)


@record
class Export(Command):
    name = "export"
    route = Route("POST", "/export")
    slow = True
    needs_jax = touches_devices = True
    reply = ExportReply
    run_id: str = ""
    kind: str = ""
    """The older name: "adapter" or "merged" ("" = from ``format``; alone, "merged" is
    ``format = "gemma"``). ``export.formats`` is the one vocabulary."""
    out: str = ""
    """Output folder; empty = <run dir>/adapter or <run dir>/merged."""
    step: int = -1
    format: str = ""
    """"adapter", "gemma", "hf", "gguf" or "gguf-lora" (``EXPORT_FORMATS``; "" = from
    ``kind``, else "adapter")."""
    force: bool = False
    """Replace ``out`` when it holds an earlier export of this tool (never anything else)."""
    # additive: the GGUF formats' type
    quant: str = ""
    """The GGUF formats' type (``export.formats.GGUF_QUANTS`` / ``LORA_QUANTS``; "" = the
    format's default, q8_0 / f32); refused with the other formats."""


COMMANDS: dict[str, type[Command]] = {
    c.name: c
    for c in (Status, Shutdown, ListModels, CheckData, Estimate, CreateRun, ListRuns, GetRun,
              StopRun, ResumeRun, DeleteRun, StreamRun, Export)
}


# =========================================================================== parsing


def parse_command(cls: type[Command], body: Any, **path_args: Any) -> Command:
    """Build ``cls`` from a JSON object (plus values from the URL path), checking every key:
    unknown keys are refused with the closest valid one, types and bounds are checked
    (``jsontypes.coerce``, strict: finite numbers, 64-bit integers)."""
    where = f"{cls.name} request"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise WorkbenchError("the request body must be a JSON object", where=where,
                             hint='send e.g. {"prompt": "..."}')
    hints = type_hints(cls)
    valid = _fields_of(cls)
    values: dict[str, Any] = {}
    for key, value in {**body, **path_args}.items():
        if key == "command":
            continue
        if key in cls.ALIASES:
            if cls.ALIASES[key] in body:
                raise WorkbenchError(f"both {key!r} and {cls.ALIASES[key]!r}", where=where,
                                     hint=f"send {cls.ALIASES[key]!r} alone ({key!r} is its older name)")
        sent, key = key, cls.ALIASES.get(key, key)  # errors name the key as sent
        if key not in valid:
            match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"did you mean {match[0]!r}?" if match else (
                f"valid keys: {', '.join(valid)}" if valid else "this request takes no body")
            raise WorkbenchError(f"unknown key {key!r}", where=where, hint=hint)
        values[key] = coerce(value, hints[key], key=sent, where=where)
        limit = LIMITS.get(key)
        if limit is not None:
            size = values[key] if isinstance(values[key], int) else len(values[key])
            if size > limit:
                raise WorkbenchError(f"{sent} is too large ({size} > {limit})", where=where)
    return cls(**values)


def command_from_json(body: Any) -> Command:
    """``{"command": "get_run", "run_id": "..."}`` → ``GetRun(run_id="...")`` (replay, broadcast)."""
    if not isinstance(body, dict) or not isinstance(body.get("command"), str):
        raise WorkbenchError("a command is a JSON object with a \"command\" name")
    cls = COMMANDS.get(body["command"])
    if cls is None:
        raise WorkbenchError(f"unknown command {body['command']!r}",
                             hint=f"commands: {', '.join(COMMANDS)}")
    return parse_command(cls, body)
