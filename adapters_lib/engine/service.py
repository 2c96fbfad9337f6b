"""The Engine: the one object in the one process that owns JAX and the devices.

It composes the parts, each in its own module:

- ``runtime.Runtime`` — JAX start-up in one background thread (after the API is up), the
  devices, the compile cache, and the guard against gemma's lazy-import race;
- ``run_queue.RunQueue`` — the one owner of run state in flight: create, stop, resume,
  release and state, behind its own lock (the handlers ask it);
- ``scheduler.Scheduler`` — the supervised device thread: it trains the queue's runs
  (``training.train``) and serves device jobs (sampling, export) between steps;
- ``runs.Registry`` — every run under every run root (the run lifecycle is
  ``adapters_lib.runs``'): runs are directories, read back for any client, and every request
  that reads a run reconciles it (an active run whose owner is gone becomes ``interrupted``);
- its handler table (command type → handler: ``engine.handlers.HANDLERS``, given by whoever
  makes the engine); ``execute`` is the one way in, for every request (sample and compare
  too), and waits first for what the command needs.
- ``hub.Hub`` — live run events, from the device thread to the streams.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from adapters_lib import runs
from adapters_lib.config import RunConfig, config_from_dict, parse_toml
from adapters_lib.engine import api, compute, training
from adapters_lib.engine.compile_ahead import AheadCompiler
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.hub import Hub
from adapters_lib.engine.run_queue import QueuedRun, RunQueue
from adapters_lib.engine.runtime import Runtime, plain_imports
from adapters_lib.engine.scheduler import Scheduler
from adapters_lib.engine.warm_compare import Warmer
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine")

QUIET = (api.Status, api.ListRuns, api.GetRun)
"""Commands logged at DEBUG (clients poll them)."""

__all__ = ["Engine"]


Handler = Callable[["Engine", Any], Any]
"""``fn(engine, cmd)`` → the command's reply (see ``engine.handlers.table``)."""


class Engine:
    def __init__(self, *, handlers: Mapping[type[api.Command], Handler], runs_root: Path | None = None,
                 warm: bool = True):
        self.runs_root = runs_root
        self.registry = runs.Registry(runs_root)
        self.hub = Hub()
        self.runtime = Runtime(warm=warm)
        self.run_queue = RunQueue(self.registry)
        self.scheduler = Scheduler(train=lambda item: training.train(self, item),
                                   on_failure=self._run_failed,
                                   prepare=self.runtime.ensure_ready,
                                   runs=self.run_queue, finish=self.run_ended)
        self.handlers: dict[type[api.Command], Handler] = dict(handlers)
        """This engine's handler table (a subclass may replace entries)."""
        self.warmer = Warmer(self)
        """A finished run's Compare programs compiled while idle (``warm_compare``)."""
        self.ahead = AheadCompiler(self)
        """The next run's programs compiled ahead (``compile_ahead``)."""
        self.started = time.time()
        self.listen: dict[str, Any] = {}
        self.open_streams = 0

    # ----------------------------------------------------------------- life cycle

    def start(self) -> None:
        """Recover runs a dead engine left behind, then start JAX and the device thread."""
        for run in self.recover():
            log.warning("run %s was left active by an engine that stopped: now interrupted",
                        run.run_id)
        self.runtime.start()
        self.scheduler.start()
        from adapters_lib import program_store

        program_store.write_when_idle(self.idle_for)  # a deferred program: written while idle
        self.ahead.gate_guesses()  # no guess starts while a run waits to start
        self.ahead.at_start()  # the last launched config's programs, on an accelerator
        if self.runtime.warm:
            threading.Thread(target=self._scan_catalog, name="catalog-scan", daemon=True).start()

    def _scan_catalog(self) -> None:
        """Scan the catalog once at start-up, so the first client's list is quick."""
        try:
            self.runtime.ensure_plain()
            with plain_imports():
                compute.models(())
        except Exception:  # noqa: BLE001 - a client asking later gets the error in words
            log.warning("the start-up catalog scan failed", exc_info=True)

    def recover(self) -> list[runs.RunDir]:
        """Runs left queued/running/stopping by a process that is gone → ``interrupted``
        (the same reconciliation every request does; a live owner keeps its run)."""
        marked = []
        for run in self.all_runs():
            before = run.status()
            if before.get("state") in runs.ACTIVE_STATES:
                after = runs.lifecycle.reconcile(run, before, here=False)
                if after.get("state") == runs.RunState.INTERRUPTED:
                    marked.append(run)
        return marked

    def shutdown(self, timeout: float = 120.0) -> None:
        """Stop the active run cleanly (it checkpoints and can be resumed), settle the queued
        ones, stop the device thread."""

        def settle(item: QueuedRun) -> None:
            try:
                runs.lifecycle.settle(item.run, "stopped",
                                      "the engine was stopped before the run started")
            except (OSError, WorkbenchError) as e:
                log.warning("run %s: %s", item.run.run_id, e)

        for item in self.scheduler.shutdown(settle, timeout):
            self.publish_status(item.run, end=True)
        self.ahead.close()

    def _run_failed(self, item: QueuedRun, err: BaseException) -> None:
        """What escaped ``training.train`` (a bug): the one failure path."""
        runs.lifecycle.record_failure(item.run, err)

    def run_ended(self, item: QueuedRun) -> None:
        """The device thread is done with ``item`` (called once): released, reconciled unless
        it was queued again meanwhile, and the stream told."""
        run = item.run
        queued_again = self.run_queue.release(item)
        if not queued_again:
            runs.lifecycle.reconcile(run, here=False)
        log.info("run %s: %s", run.run_id, run.state)
        if not queued_again:  # before the stream's end: a client then sees status.warming
            self.warmer.after_run(run)
            self.ahead.after_run()
        self.publish_status(run, end=not queued_again)

    def ensure_jax(self) -> None:
        """JAX, the devices and the heavy modules, imported (see ``runtime``)."""
        self.runtime.ensure_ready()

    def on_device(self, fn: Callable[[], Any], label: str = "job", *,
                  internal: bool = False) -> concurrent.futures.Future:
        """Queue ``fn`` for the device thread (between steps when a run trains)."""
        return self.scheduler.submit(fn, label, internal=internal)

    def idle_for(self) -> float:
        """Seconds since the engine last did anything (0 while it trains or streams)."""
        return self.scheduler.idle_for(self.open_streams)

    @property
    def last_activity(self) -> float:
        return self.scheduler.last_activity

    @last_activity.setter
    def last_activity(self, value: float) -> None:
        self.scheduler.last_activity = value

    # ----------------------------------------------------------------- commands

    def execute(self, cmd: api.Command) -> Any:
        """Run one command through the handler table; its reply (see ``handlers.table``)."""
        handler = self.handlers.get(type(cmd))
        if handler is None:
            raise EngineError(f"command {cmd.name!r} is not served by this engine", status=501,
                              hint="see docs/engine-api.md")
        level = logging.DEBUG if isinstance(cmd, QUIET) else logging.INFO
        log.log(level, "command %s", json.dumps(_brief(cmd.to_json())))
        if cmd.needs_jax:
            self.runtime.ensure_ready()  # no import may race gemma's (see runtime)
            return handler(self, cmd)
        self.runtime.ensure_plain()
        with plain_imports():
            return handler(self, cmd)

    def run_training(self, item: QueuedRun) -> None:
        """Train ``item`` on this process's devices (the multi-host leader trains on all)."""
        training.run_here(self, item)

    def estimate_json(self, cfg: RunConfig, device: str = "") -> dict[str, Any]:
        """The estimate as JSON data (the multi-host leader adds its hosts); ``device``: plan
        for a named chip (``compute.estimate``)."""
        return compute.estimate(cfg, self.runtime.devices, device)

    def config_of(self, config: dict[str, Any] | None, toml_text: str,
                  overrides: tuple[str, ...], source: str) -> RunConfig:
        """A request's run config (a dict or TOML text, plus ``--set`` overrides), checked."""
        if config is not None and toml_text:
            raise EngineError("send either config or config_toml, not both", where=source)
        raw: dict[str, Any] = config or {}
        if toml_text:  # a syntax error cites source:line; nesting too deep is one line too
            raw = parse_toml(toml_text, source)
        return config_from_dict(raw, source=source, text=toml_text, overrides=overrides)

    # ----------------------------------------------------------------- runs

    def all_runs(self) -> list[runs.RunDir]:
        return self.registry.all()

    def roots(self) -> list[Path]:
        return self.registry.roots()

    def find_run(self, run_id: str) -> runs.RunDir:
        """An exact id or a unique prefix (never a suffix); a symbolic link is refused."""
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise EngineError(f"bad run id {run_id!r}", status=400)
        try:
            return self.registry.find(run_id)
        except runs.NoSuchRun as e:
            raise EngineError(e.message, status=404, where=e.where, hint=e.hint) from None
        except runs.LinkedRun as e:
            raise EngineError(e.message, status=409, where=e.where, hint=e.hint) from None
        except runs.AmbiguousRun as e:
            raise EngineError(e.message, status=400, where=e.where, hint=e.hint) from None

    def state_of(self, run: runs.RunDir) -> dict[str, Any]:
        """The run's status, reconciled (``RunQueue.state``)."""
        return self.run_queue.state(run)

    def summary(self, run: runs.RunDir) -> api.RunSummary:
        status = self.state_of(run)
        return api.RunSummary.from_json({"id": run.run_id, "dir": str(run.path), **status})

    def publish_status(self, run: runs.RunDir, *, end: bool = False) -> None:
        status = self.summary(run).to_json()
        self.hub.publish(run.run_id, "status", status)
        if end:
            self.hub.publish(run.run_id, "end", {"state": status.get("state")})

    def replay(self, run: runs.RunDir, since_step: int) -> list[dict[str, Any]]:
        """Stream items already on disk: metrics with step > since_step, and every event;
        then the log lines the hub keeps of a run that trains here."""
        items = [{"type": "event", "data": e} for e in run.events()]
        items += [{"type": "metrics", "data": m} for m in run.metrics()
                  if int(m.get("step", 0)) > since_step]
        items += [{"type": "log", "data": line} for line in self.hub.recent_logs(run.run_id)]
        return items


def _brief(data: dict[str, Any]) -> dict[str, Any]:
    """A command for the log: a config dict summarized, long strings cut."""
    out = {}
    for k, v in data.items():
        if k == "config" and v is not None:
            v = "<dict>"
        elif isinstance(v, str) and len(v) > 200:
            v = v[:200] + "…"
        out[k] = v
    return out
