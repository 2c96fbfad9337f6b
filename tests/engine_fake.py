"""A stand-in for ``workbench.client.EngineClient`` that answers with replies recorded from
the real engine (``tests/recorded/engine_replies.json``, made by
``tests/record_engine_replies.py``), read through the API's own types.

Every answer is built with ``adapters_lib.engine.api``'s ``from_json``, so the fake cannot
answer with a key or a type the engine does not have; ``tests/test_engine_contract.py``
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
from workbench.client import EngineRequestError

RECORDING = Path(__file__).with_name("recorded") / "engine_replies.json"


def load_recording(path: Path = RECORDING) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


class EngineFake:
    """Same methods and reply types as ``EngineClient``; answers from the recording.

    State is kept only where a screen would notice: ``stop_run``/``delete_run`` of a run
    change what ``list_runs`` says next. ``calls`` lists every call (name, args) in order.
    """

    where = "local"
    link = None

    def __init__(self, recording: dict[str, Any] | None = None) -> None:
        self.data = recording or load_recording()
        self.calls: list[tuple[str, tuple, dict]] = []
        self._runs = {rid: api.RunDetail.from_json(r["detail"])
                      for rid, r in self.data["runs"].items()}
        self._deleted: set[str] = set()
        self._created = [api.RunSummary.from_json(r) for r in self.data["created"]]
        self._new: dict[str, api.RunSummary] = {}
        """Runs created here that the recording did not finish (they stay queued/stopped)."""

    # ----------------------------------------------------------------- helpers

    @property
    def run_ids(self) -> list[str]:
        """The recorded finished runs, newest first (as ``list_runs`` orders them)."""
        return sorted((r for r in self._runs if r not in self._deleted), reverse=True)

    def _log(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))

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

    def _items(self, raw: list[dict[str, Any]], items: dict) -> Iterator[api.StreamItem]:
        for item in raw:
            yield api.stream_item(item["type"], item["data"], items)

    # ----------------------------------------------------------------- engine

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

    def status(self, *, wait: bool = False) -> api.EngineStatus:
        """The first answer is the one recorded at start-up (JAX ready, gemma still
        importing: ``modules_ready`` false); every later one is the one recorded after the
        runs (gemma imported), as a real engine's status moves on. A recording without the
        later answer repeats the first."""
        first = not any(name == "status" for name, _, _ in self.calls)
        self._log("status", wait=wait)
        later = self.data.get("status_later")
        return api.EngineStatus.from_json(self.data["status"] if first or later is None
                                          else later)

    def shutdown(self) -> api.ShutdownReply:
        self._log("shutdown")
        return api.ShutdownReply(stopping=True, active_run=None)

    def models(self, folders: list[str] | tuple[str, ...] = ()) -> list[api.ModelInfo]:
        self._log("models", folders=tuple(folders))
        return [api.ModelInfo.from_json(m) for m in self.data["models"]]

    def data_check(self, path: str = "", **kwargs: Any) -> api.DataReport:
        self._log("data_check", path, **kwargs)
        return api.DataReport.from_json(self.data["data_check"])

    def estimate(self, config: dict[str, Any] | None = None, *, config_toml: str = "",
                 overrides: list[str] | tuple[str, ...] = ()) -> api.EstimateReply:
        """The recorded estimate; the one with a mesh warning when the tensor axis is > 1."""
        self._log("estimate", config, overrides=tuple(overrides))
        tensor = ((config or {}).get("mesh") or {}).get("tensor", 1)
        warned = tensor not in (1, -1) or any(o.startswith("mesh.tensor=") and
                                              o.split("=", 1)[1] not in ("1", "-1")
                                              for o in overrides)
        return api.EstimateReply.from_json(
            self.data["estimate_warning" if warned else "estimate"])

    # ----------------------------------------------------------------- runs

    def create_run(self, config: dict[str, Any] | None = None, **kwargs: Any) -> api.RunSummary:
        """The recorded creations in order (the first is a run the recording then finished);
        after them, the last one again."""
        self._log("create_run", config, **kwargs)
        self._check_config(config, kwargs.get("config_toml", ""), kwargs.get("source", ""))
        name = ((config or {}).get("run") or {}).get("name")
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

    def list_runs(self) -> list[api.RunSummary]:
        self._log("list_runs")
        listed = [api.RunSummary.from_json(r) for r in self.data["list_runs"]]
        kept = [r for r in listed if r.id in self._runs and r.id not in self._deleted]
        return sorted([*self._new.values(), *kept], key=lambda r: r.id, reverse=True)

    def get_run(self, run_id: str, *, metrics: bool = True, events: bool = True) -> api.RunDetail:
        self._log("get_run", run_id, metrics=metrics, events=events)
        run = self._find(run_id)
        return run.replace(metrics=run.metrics if metrics else None,
                           events=run.events if events else None)

    def wait_run(self, run_id: str, timeout: float = 600.0, **_: Any) -> api.RunDetail:
        return self.get_run(run_id, metrics=False, events=False)

    def stop_run(self, run_id: str) -> api.RunSummary:
        self._log("stop_run", run_id)
        run = self._find(run_id)
        if run.state not in ("queued", "running"):
            raise self._refuse("not_running")
        reply = api.RunSummary.from_json({**self.data["stop_run"], "id": run.id,
                                          "run_id": run.id})
        self._new[run.id] = reply
        return reply

    def resume_run(self, run_id: str) -> api.RunSummary:
        self._log("resume_run", run_id)
        run = self._find(run_id)
        if run.state not in ("stopped", "failed", "interrupted"):
            raise self._refuse("completed_resume")
        reply = api.RunSummary.from_json({**self.data["stop_run"], "id": run.id,
                                          "run_id": run.id, "state": "queued",
                                          "message": "resume requested"})
        self._new[run.id] = reply
        return reply

    def delete_run(self, run_id: str) -> api.DeleteReply:
        self._log("delete_run", run_id)
        run = self._find(run_id)
        self._deleted.add(run.id)
        self._new.pop(run.id, None)
        return api.DeleteReply(id=run.id, deleted=True)

    def stream_run(self, run_id: str, since_step: int = 0) -> Iterator[api.StreamItem]:
        self._log("stream_run", run_id, since_step=since_step)
        run = self._find(run_id)
        raw = self.data["runs"][run.id]["stream"]
        kept = [i for i in raw if i["type"] != "metrics" or i["data"]["step"] > since_step]
        return self._items(kept, api.RUN_STREAM_ITEMS)

    # ----------------------------------------------------------------- generation, export

    def sample(self, prompt: str, *, run_id: str = "", **kwargs: Any) -> Iterator[api.StreamItem]:
        self._log("sample", prompt, run_id=run_id, **kwargs)
        if run_id:
            self._find(run_id)
        return self._items(self.data["sample" if run_id else "sample_base"], api.SAMPLE_ITEMS)

    def compare(self, prompt: str, run_id: str, **kwargs: Any) -> Iterator[api.StreamItem]:
        self._log("compare", prompt, run_id=run_id, **kwargs)
        self._find(run_id)
        return self._items(self.data["compare"], api.COMPARE_ITEMS)

    def export(self, run_id: str, **kwargs: Any) -> api.ExportReply:
        self._log("export", run_id, **kwargs)
        self._find(run_id)
        return api.ExportReply.from_json(self.data["export"])
