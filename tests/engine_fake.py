"""A stand-in for ``workbench.client.EngineClient`` that answers with replies recorded from
the real engine (``tests/recorded/engine_replies.json``, made by
``tests/record_engine_replies.py``), read through the API's own types.

It is the client's own typed calls (``workbench.engine_calls.EngineCalls``: the same methods
building the same commands) with ``call`` and ``stream`` answered from the recording by
command type, and every answer read back with the command's reply type (``from_json``), so
the fake cannot answer with a key or a type the engine does not have; ``tests/test_engine_contract.py``
sends the same requests to a real engine and to this fake and compares the shapes. The
recording holds two finished demo runs (``fake.run_ids``) with every metric and event, 8
CPU devices (the status at start-up and after the runs), the catalog (the demo, and an unreadable folder), a data report, two
estimates (one with a mesh warning), sample and compare streams, an export and refusals.

Use it where a test needs deterministic engine answers (TUI snapshots, screen logic);
flows that must prove the real thing use the real engine fixture (``fixtures_engine``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from adapters_lib.engine import api
from adapters_lib.runs.state import RESUMABLE_STATES, RunState
from workbench.engine_calls import EngineCalls
from workbench.engine_wire import EngineRequestError

RECORDING = Path(__file__).with_name("recorded") / "engine_replies.json"


def load_recording(path: Path = RECORDING) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


class EngineFake(EngineCalls):
    """The engine client's typed calls (``workbench.engine_calls.EngineCalls``, the same
    methods and signatures) over commands answered from the recording by command type.

    State is kept only where a screen would notice: ``stop_run``/``delete_run`` of a run
    change what ``list_runs`` says next. ``calls`` lists every command sent, in order.
    """

    where = "local"
    link = None

    def __init__(self, recording: dict[str, Any] | None = None) -> None:
        self.data = recording or load_recording()
        self.calls: list[api.Command] = []
        self._runs = {rid: api.RunDetail.from_json(r["detail"])
                      for rid, r in self.data["runs"].items()}
        self._deleted: set[str] = set()
        self._created = [api.RunSummary.from_json(r) for r in self.data["created"]]
        self._new: dict[str, api.RunSummary] = {}
        """Runs created here that the recording did not finish (they stay queued/stopped)."""
        self._answers: dict[type[api.Command], Callable[[Any], Any]] = {
            api.Status: self._status, api.Shutdown: self._shutdown, api.ListModels: self._models,
            api.CheckData: self._data_check, api.Estimate: self._estimate,
            api.CreateRun: self._create_run, api.ListRuns: self._list_runs, api.GetRun: self._get_run,
            api.StopRun: self._stop_run, api.ResumeRun: self._resume_run,
            api.DeleteRun: self._delete_run, api.Export: self._export,
            api.ListCompares: self._list_compares, api.CompileAhead: self._compile_ahead,
            api.ListCompileJobs: self._compile_jobs}
        self._streams: dict[type[api.Command], Callable[[Any], list[dict[str, Any]]]] = {
            api.StreamRun: self._stream_run, api.Sample: self._sample, api.Compare: self._compare}

    # ----------------------------------------------------------------- the two primitives

    def call(self, cmd: api.Command, *, timeout: float | None = None) -> Any:
        """The recorded answer to ``cmd``, read back as the client reads the engine's."""
        self.calls.append(cmd)
        answer = self._answers.get(type(cmd))
        if answer is None:
            raise NotImplementedError(f"the recording has no answer to {cmd.name}")
        reply = answer(cmd)
        return cmd.reply.from_json(api.to_jsonable(reply), where=f"{cmd.name} reply")

    def stream(self, cmd: api.Command) -> Iterator[api.StreamItem]:
        self.calls.append(cmd)
        answer = self._streams.get(type(cmd))
        if answer is None:
            raise NotImplementedError(f"the recording has no stream of {cmd.name}")
        return self._items(answer(cmd), cmd.items)

    # ----------------------------------------------------------------- helpers

    @property
    def run_ids(self) -> list[str]:
        """The recorded finished runs, newest first (as ``list_runs`` orders them)."""
        return sorted((r for r in self._runs if r not in self._deleted), reverse=True)

    def _refuse(self, name: str) -> EngineRequestError:
        err = api.ErrorReply.from_json(self.data["errors"][name]).error
        return EngineRequestError(err.message, status=err.status or 400, where=err.where,
                                  hint=err.hint)

    @staticmethod
    def _check_config(config: dict[str, Any] | None, toml_text: str, source: str) -> None:
        """The real config check (``adapters_lib.config``, no JAX): a bad config is refused
        as the engine refuses it (400, where, hint)."""
        from adapters_lib.config import config_from_dict, parse_toml
        from adapters_lib.errors import WorkbenchError

        source = source or "<run config>"
        try:
            raw = parse_toml(toml_text, source) if toml_text else (config or {})
            config_from_dict(raw, source=source, text=toml_text)
        except WorkbenchError as e:
            raise EngineRequestError(e.message, status=400, where=e.where, hint=e.hint) from None

    def _find(self, run_id: str) -> api.RunDetail:
        known = {**{r: self._runs[r] for r in self.run_ids},
                 **{r: api.RunDetail.from_json(s.to_json()) for r, s in self._new.items()}}
        if run_id in known:  # an exact id first, then a unique prefix (as the registry)
            return known[run_id]
        matches = [r for r in known if r.startswith(run_id)]
        if len(matches) != 1:
            raise self._refuse("no_such_run")
        return known[matches[0]]

    @staticmethod
    def _items(raw: list[dict[str, Any]], items: dict) -> Iterator[api.StreamItem]:
        for item in raw:
            yield api.stream_item(item["type"], item["data"], items)

    # ----------------------------------------------------------------- what a client has besides

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def __enter__(self) -> EngineFake:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def on_link(self, callback: Callable[[Any], Any]) -> None:
        pass

    def wait_run(self, run_id: str, timeout: float = 600.0, **_: Any) -> api.RunDetail:
        return self.get_run(run_id, metrics=False, events=False)

    # ----------------------------------------------------------------- the engine

    def _status(self, cmd: api.Status) -> dict[str, Any]:
        """The first answer is the one recorded at start-up (JAX ready, gemma still
        importing: ``modules_ready`` false); every later one is the one recorded after the
        runs (gemma imported), as a real engine's status moves on. A recording without the
        later answer repeats the first."""
        first = sum(isinstance(c, api.Status) for c in self.calls) == 1
        later = self.data.get("status_later")
        return self.data["status"] if first or later is None else later

    def _shutdown(self, cmd: api.Shutdown) -> api.ShutdownReply:
        return api.ShutdownReply(stopping=True, active_run=None)

    def _models(self, cmd: api.ListModels) -> dict[str, Any]:
        return {"models": self.data["models"]}

    def _data_check(self, cmd: api.CheckData) -> dict[str, Any]:
        return {"report": self.data["data_check"]}

    def _estimate(self, cmd: api.Estimate) -> dict[str, Any]:
        """The recorded estimate; the one with a mesh warning when the tensor axis is > 1."""
        tensor = ((cmd.config or {}).get("mesh") or {}).get("tensor", 1)
        warned = tensor not in (1, -1) or any(o.startswith("mesh.tensor=") and
                                              o.split("=", 1)[1] not in ("1", "-1")
                                              for o in cmd.overrides)
        return self.data["estimate_warning" if warned else "estimate"]

    # ----------------------------------------------------------------- runs

    def _create_run(self, cmd: api.CreateRun) -> api.RunSummary:
        """The recorded creations in order (the first is a run the recording then finished);
        after them, the last one again."""
        self._check_config(cmd.config, cmd.config_toml, cmd.source)
        name = ((cmd.config or {}).get("run") or {}).get("name")
        named = [r for r in self._created if name and r.id.endswith("-" + name)]
        if named:  # the recorded creation of a run of that name (the scenario's "stopped")
            reply = named[0]
            if len(self._created) > 1:
                self._created.remove(reply)
        else:
            reply = self._created.pop(0) if len(self._created) > 1 else self._created[0]
        if reply.id not in self._runs:
            self._new[reply.id] = reply
        return reply

    def _compile_ahead(self, cmd: api.CompileAhead) -> api.CompileAheadReply:
        """The recorded engine is a CPU one: it compiles nothing ahead (``engine.compile_ahead``)."""
        from adapters_lib.engine.compile_ahead import CPU_MESSAGE

        self._check_config(cmd.config, cmd.config_toml, cmd.source)
        return api.CompileAheadReply(ahead=False, backend="cpu", message=CPU_MESSAGE)

    def _compile_jobs(self, cmd: api.ListCompileJobs) -> api.CompileJobs:
        from adapters_lib.engine.compile_ahead import CPU_MESSAGE

        return api.CompileJobs(ahead=False, backend="cpu", message=CPU_MESSAGE)

    def _list_runs(self, cmd: api.ListRuns) -> api.RunList:
        listed = [api.RunSummary.from_json(r) for r in self.data["list_runs"]]
        kept = [r for r in listed if r.id in self._runs and r.id not in self._deleted]
        return api.RunList(runs=sorted([*self._new.values(), *kept], key=lambda r: r.id, reverse=True))

    def _get_run(self, cmd: api.GetRun) -> api.RunDetail:
        run = self._find(cmd.run_id)
        return run.replace(metrics=run.metrics if cmd.metrics else None,
                           events=run.events if cmd.events else None)

    def _stop_run(self, cmd: api.StopRun) -> dict[str, Any]:
        run = self._find(cmd.run_id)
        if run.state not in (RunState.QUEUED, RunState.RUNNING):
            raise self._refuse("not_running")
        reply = api.RunSummary.from_json({**self.data["stop_run"], "id": run.id, "run_id": run.id})
        self._new[run.id] = reply
        return reply.to_json()

    def _resume_run(self, cmd: api.ResumeRun) -> dict[str, Any]:
        run = self._find(cmd.run_id)
        if run.state not in RESUMABLE_STATES:
            raise self._refuse("completed_resume")
        reply = api.RunSummary.from_json({**self.data["stop_run"], "id": run.id, "run_id": run.id,
                                          "state": "queued", "message": "resume requested"})
        self._new[run.id] = reply
        return reply.to_json()

    def _delete_run(self, cmd: api.DeleteRun) -> api.DeleteReply:
        run = self._find(cmd.run_id)
        self._deleted.add(run.id)
        self._new.pop(run.id, None)
        return api.DeleteReply(id=run.id, deleted=True)

    def _stream_run(self, cmd: api.StreamRun) -> list[dict[str, Any]]:
        run = self._find(cmd.run_id)
        raw = self.data["runs"][run.id]["stream"]
        return [i for i in raw if i["type"] != "metrics" or i["data"]["step"] > cmd.since_step]

    # ----------------------------------------------------------------- generation, export

    def _sample(self, cmd: api.Sample) -> list[dict[str, Any]]:
        if cmd.run_id:
            self._find(cmd.run_id)
        return self.data["sample" if cmd.run_id else "sample_base"]

    def _compare(self, cmd: api.Compare) -> list[dict[str, Any]]:
        self._find(cmd.run_id)
        return self.data["compare"]

    def _list_compares(self, cmd: api.ListCompares) -> dict[str, Any]:
        self._find(cmd.run_id)
        return {"compares": self.data.get("compares", [])}

    def _export(self, cmd: api.Export) -> dict[str, Any]:
        self._find(cmd.run_id)
        return self.data["export"]
