"""The engine's commands: one small frozen dataclass per thing a client can ask.

Every request goes through a command: the HTTP routes parse JSON into one with
``parse_command`` (validated, unknown keys refused), the ``Engine`` dispatches it by type
(``Engine.execute``), and the engine log records it. Because a command is plain data it
can be logged, replayed, or (multi-host) broadcast to every host before it runs.

No pickle: commands travel as JSON objects only (``to_json`` / ``parse_command``).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

from adapters_lib.errors import WorkbenchError

API_VERSION = 1


@dataclass(frozen=True)
class Command:
    name: ClassVar[str] = ""
    touches_devices: ClassVar[bool] = False
    """True when the command runs device code (multi-host: broadcast it to every host)."""

    def to_json(self) -> dict[str, Any]:
        return {"command": self.name, **dataclasses.asdict(self)}


# --------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class Status(Command):
    name = "status"
    wait: bool = False
    """Wait until JAX is imported and the devices are known."""


@dataclass(frozen=True)
class Shutdown(Command):
    name = "shutdown"


# --------------------------------------------------------------------------- pure compute


@dataclass(frozen=True)
class ListModels(Command):
    name = "models"
    folders: tuple[str, ...] = ()
    """Extra folders to search for weights, besides the configured ones."""


@dataclass(frozen=True)
class CheckData(Command):
    name = "data_check"
    path: str = ""
    format: str = "auto"
    config: dict[str, Any] | None = None
    """A run config (dict) whose [data]/[model] sections give the check its settings."""
    config_toml: str = ""
    limit: int = 0
    """Check at most this many records, where the data area supports it (0 = all)."""


@dataclass(frozen=True)
class Estimate(Command):
    name = "estimate"
    config: dict[str, Any] | None = None
    config_toml: str = ""
    overrides: tuple[str, ...] = ()
    source: str = ""
    """Where the config came from (a file path), for error messages."""


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class CreateRun(Command):
    name = "create_run"
    touches_devices = True
    config: dict[str, Any] | None = None
    config_toml: str = ""
    overrides: tuple[str, ...] = ()
    source: str = ""
    """Where the config came from (a file path), for error messages."""


@dataclass(frozen=True)
class ListRuns(Command):
    name = "list_runs"


@dataclass(frozen=True)
class GetRun(Command):
    name = "get_run"
    run_id: str = ""
    metrics: bool = True
    events: bool = True


@dataclass(frozen=True)
class StopRun(Command):
    name = "stop_run"
    run_id: str = ""


@dataclass(frozen=True)
class ResumeRun(Command):
    name = "resume_run"
    touches_devices = True
    run_id: str = ""


@dataclass(frozen=True)
class DeleteRun(Command):
    name = "delete_run"
    run_id: str = ""


@dataclass(frozen=True)
class StreamRun(Command):
    name = "stream_run"
    run_id: str = ""
    since_step: int = 0
    """Replay metrics with step > since_step (0 = everything), then follow live."""


# --------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class Sample(Command):
    name = "sample"
    touches_devices = True
    prompt: str = ""
    run_id: str = ""
    """Tuned model of this run; empty = the base model given by ``model``."""
    model: str = "demo"
    step: int = -1
    """Checkpoint step of the run (-1 = latest)."""
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    chat: bool = True
    """Wrap the prompt in the Gemma chat template."""


@dataclass(frozen=True)
class Compare(Command):
    name = "compare"
    touches_devices = True
    prompt: str = ""
    run_id: str = ""
    step: int = -1
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    chat: bool = True


@dataclass(frozen=True)
class Export(Command):
    name = "export"
    touches_devices = True
    run_id: str = ""
    kind: str = "adapter"
    """"adapter" (LoRA weights only) or "merged" (base with the adapter fused in)."""
    out: str = ""
    """Output folder; empty = <run dir>/adapter or <run dir>/merged."""
    step: int = -1
    format: str = ""
    """Output format for the export area ("" = its default)."""
    force: bool = False
    """Replace ``out`` when it holds an earlier export of this tool (never anything else)."""


COMMANDS: dict[str, type[Command]] = {
    c.name: c
    for c in (Status, Shutdown, ListModels, CheckData, Estimate, CreateRun, ListRuns, GetRun,
              StopRun, ResumeRun, DeleteRun, StreamRun, Sample, Compare, Export)
}

LIMITS = {"prompt": 64 * 1024, "config_toml": 256 * 1024, "max_tokens": 8192}


# --------------------------------------------------------------------------- parsing


def _type_name(typ: Any) -> str:
    return getattr(typ, "__name__", str(typ))


def _coerce(value: Any, typ: Any, key: str, where: str) -> Any:
    origin = get_origin(typ)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(typ) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key, where)
    bad = WorkbenchError(f"{key} must be {_describe(typ)}, got {type(value).__name__}",
                         where=where)
    if typ is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise bad
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return value
    raise AssertionError(f"unhandled field type {typ}")


def _describe(typ: Any) -> str:
    origin = get_origin(typ)
    if origin is tuple:
        return "a list of strings"
    if origin is dict:
        return "a JSON object"
    if origin in (Union, types.UnionType):
        return _describe([a for a in get_args(typ) if a is not type(None)][0]) + " or null"
    return {"bool": "true or false", "int": "an integer", "float": "a number",
            "str": "a string"}.get(_type_name(typ), _type_name(typ))


def parse_command(cls: type[Command], body: Any, **path_args: Any) -> Command:
    """Build ``cls`` from a JSON object (plus values from the URL path), checking every key."""
    where = f"{cls.name} request"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise WorkbenchError("the request body must be a JSON object", where=where,
                             hint='send e.g. {"prompt": "..."}')
    hints = get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    values: dict[str, Any] = {}
    for key, value in {**body, **path_args}.items():
        if key == "command":
            continue
        if key not in valid:
            match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"did you mean {match[0]!r}?" if match else (
                f"valid keys: {', '.join(valid)}" if valid else "this request takes no body")
            raise WorkbenchError(f"unknown key {key!r}", where=where, hint=hint)
        values[key] = _coerce(value, hints[key], key, where)
        limit = LIMITS.get(key)
        if limit is not None:
            size = values[key] if isinstance(values[key], int) else len(values[key])
            if size > limit:
                raise WorkbenchError(f"{key} is too large ({size} > {limit})", where=where)
    return cls(**values)


def command_from_json(body: Any) -> Command:
    """``{"command": "get_run", "run_id": "..."}`` → ``GetRun(run_id="...")`` (for replay)."""
    if not isinstance(body, dict) or not isinstance(body.get("command"), str):
        raise WorkbenchError("a command is a JSON object with a \"command\" name")
    cls = COMMANDS.get(body["command"])
    if cls is None:
        raise WorkbenchError(f"unknown command {body['command']!r}",
                             hint=f"commands: {', '.join(COMMANDS)}")
    return parse_command(cls, body)

