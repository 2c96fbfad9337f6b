"""The Engine: the one object in the one process that owns JAX and the devices.

- JAX is imported in a background thread after the API is up (start-to-ready stays fast).
- One *device thread* runs everything that touches devices: a training run at a time (FIFO
  queue of runs) and device jobs (sampling, export). While a run trains, jobs are served
  between its steps (``TrainControl.between_steps``); when idle, the device thread runs them.
- Runs are directories (``adapters_lib.runs``, looked up through its one ``Registry``): the
  engine reads them back for any client, so a client that reattaches sees every metric. Every
  request that reads a run reconciles it (``runs.lifecycle.reconcile``): an active run whose
  owner (``owner.json``: pid, start time, host) is gone is marked ``interrupted`` and can be
  resumed; a live foreground ``train`` is left alone.
- A run's failure, wherever it happens (preparing it, training it, its folder removed, a full
  disk), is recorded by ``runs.lifecycle.record_failure``; the device thread goes on.
- Every request arrives as a command (``commands.py``) and goes through ``execute``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import os
import platform
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters_lib import __version__, paths, runs
from adapters_lib.config import RunConfig, config_from_dict
from adapters_lib.engine import api, compute
from adapters_lib.engine import devices as devices_mod
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.hub import Hub
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine")

TERMINAL_STATES = ("stopped", "completed", "failed", "interrupted")


IMPORT_FREE = frozenset({"status", "shutdown", "list_runs", "get_run", "stop_run", "resume_run",
                         "delete_run", "create_run", "stream_run", "list_sweeps", "get_sweep"})
"""Commands that import nothing: served at once, even while the engine imports JAX."""


@dataclass
class Job:
    """A function to run on the device thread; its result (or exception) lands in ``future``."""

    fn: Callable[[], Any]
    label: str
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


@dataclass
class QueuedRun:
    run: runs.RunDir
    resume: bool
    stop: threading.Event = field(default_factory=threading.Event)


class RunControl:
    """The ``TrainControl`` the engine hands to ``run_training`` (duck-typed)."""

    def __init__(self, engine: Engine, item: QueuedRun):
        self.engine = engine
        self.item = item
        self.run_id = item.run.run_id

    def should_stop(self) -> bool:
        return self.item.stop.is_set() or self.engine._closing.is_set()

    def on_metrics(self, record: dict[str, Any]) -> None:
        self.engine.hub.publish(self.run_id, "metrics", _jsonable(record))

    def on_event(self, record: dict[str, Any]) -> None:
        record = _jsonable(record)
        self.engine.hub.publish(self.run_id, "event", record)
        if record.get("kind") == "state":
            self.engine.publish_status(self.item.run)

    def between_steps(self) -> None:
        self.engine.drain_jobs()


def _jsonable(record: dict[str, Any]) -> dict[str, Any]:
    """Numpy/JAX scalars → Python numbers, so any record serializes."""
    out = {}
    for k, v in record.items():
        if hasattr(v, "item") and callable(v.item):
            try:
                v = v.item()
            except (ValueError, TypeError):
                v = str(v)
        out[k] = v
    return out


def checkpoint_steps(run: runs.RunDir) -> list[int]:
    """Complete, finite checkpoints (``runs.checkpoints``' one rule)."""
    return runs.list_checkpoints(run)


class Engine:
    def __init__(self, *, runs_root: Path | None = None, warm: bool = True):
        self.runs_root = runs_root
        self.registry = runs.Registry(runs_root)
        self.hub = Hub()
        self.started = time.time()
        self.listen: dict[str, Any] = {}
        self._warm = warm
        self._jax_ready = threading.Event()
        self._devices_known = threading.Event()
        self._jax_lock = threading.Lock()
        self._jax_error: str | None = None
        self._devices: list[dict[str, Any]] = []
        self._backend: str | None = None
        self._cond = threading.Condition()
        self._jobs: collections.deque[Job] = collections.deque()
        self._queue: collections.deque[QueuedRun] = collections.deque()
        self._active: QueuedRun | None = None
        self._closing = threading.Event()
        self._device_thread: threading.Thread | None = None
        self._device_error: str | None = None
        self.device_thread_id: int | None = None
        self.last_activity = time.monotonic()
        self.open_streams = 0

    # ----------------------------------------------------------------- life cycle

    def start(self) -> None:
        """Recover runs a dead engine left behind, then start JAX and the device thread."""
        for run in self.recover():
            log.warning("run %s was left active by an engine that stopped: now interrupted",
                        run.run_id)
        if self._warm:
            threading.Thread(target=self.ensure_jax, name="jax-import", daemon=True).start()
        self._device_thread = threading.Thread(target=self._device_loop, name="device",
                                               daemon=True)
        self._device_thread.start()

    def recover(self) -> list[runs.RunDir]:
        """Runs left queued/running/stopping by a process that is gone → ``interrupted``
        (the same reconciliation every request does; a live owner keeps its run)."""
        marked = []
        for run in self.all_runs():
            before = run.status()
            if before.get("state") in runs.ACTIVE_STATES:
                after = runs.lifecycle.reconcile(run, before, here=False)
                if after.get("state") == "interrupted":
                    marked.append(run)
        return marked

    def shutdown(self, timeout: float = 120.0) -> None:
        """Stop the active run cleanly (it can be resumed), stop the device thread."""
        self._closing.set()
        with self._cond:  # queue and states change together (state_of reads both)
            queued = list(self._queue)
            self._queue.clear()
            if self._active is not None:
                self._active.stop.set()
            for item in queued:
                try:
                    runs.lifecycle.settle(item.run, "stopped",
                                          "the engine was stopped before the run started")
                except (OSError, WorkbenchError) as e:
                    log.warning("run %s: %s", item.run.run_id, e)
            self._cond.notify_all()
        for item in queued:
            self.publish_status(item.run, end=True)
        if self._device_thread is not None:
            self._device_thread.join(timeout)

    def ensure_jax(self) -> None:
        """Import JAX and list the devices (once; other callers wait for the first)."""
        with self._jax_lock:
            if not self._jax_ready.is_set():
                self._import_jax()

    def _import_jax(self) -> None:
        """Import JAX, then gemma and the engine's own heavy modules, in one thread.

        gemma (through etils ``lazy_imports``) swaps ``builtins.__import__`` for the whole
        process while its modules load: an import in another thread at that moment gets a
        lazy stub (``from typing import get_type_hints`` turned into a module!). So every
        heavy import happens here, once, and commands that may import wait for it
        (``execute``); the others (status, runs) import nothing.
        """
        t0 = time.perf_counter()
        try:
            import jax

            devices_mod.enable_compile_cache(jax)
            devices = jax.devices()
            self._backend = jax.default_backend()
            self._devices = [devices_mod.device_info(d) for d in devices]
            self._devices_known.set()
            log.info("JAX ready in %.1f s: backend %s, %d device(s)", time.perf_counter() - t0,
                     self._backend, len(devices))
            devices_mod.import_heavy()
            log.info("engine modules imported in %.1f s", time.perf_counter() - t0)
        except Exception as e:  # a broken accelerator install: say so in status
            self._jax_error = f"{type(e).__name__}: {e}"
            log.exception("JAX failed to start")
        finally:
            self._devices_known.set()
            self._jax_ready.set()

    # ----------------------------------------------------------------- device thread

    def _device_loop(self) -> None:
        self.device_thread_id = threading.get_ident()
        while True:
            with self._cond:
                while not self._jobs and not self._queue and not self._closing.is_set():
                    self._cond.wait()
                if self._closing.is_set() and not self._jobs:
                    return
                job = self._jobs.popleft() if self._jobs else None
                item = None
                if job is None and self._queue:
                    item = self._queue.popleft()
                    self._active = item
            self.ensure_jax()
            if job is not None:
                self._run_job(job)
            elif item is not None:
                try:
                    self._train(item)
                except Exception:  # noqa: BLE001 - the device thread must outlive any run
                    log.exception("run %s: unexpected error after the run", item.run.run_id)
                finally:
                    with self._cond:
                        self._active = None
                    self.last_activity = time.monotonic()

    def _run_job(self, job: Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(job.fn())
        except BaseException as e:  # noqa: BLE001 - handed to the waiting request
            job.future.set_exception(e)
        finally:
            self.last_activity = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the engine last did anything (0 while it trains or streams)."""
        with self._cond:
            busy = self._active is not None or bool(self._queue) or bool(self._jobs)
        if busy or self.open_streams:
            self.last_activity = time.monotonic()
            return 0.0
        return time.monotonic() - self.last_activity

    def drain_jobs(self) -> None:
        """Run the device jobs waiting now (called between training steps)."""
        while True:
            with self._cond:
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            self._run_job(job)

    def on_device(self, fn: Callable[[], Any], label: str = "job") -> concurrent.futures.Future:
        """Queue ``fn`` for the device thread (between steps when a run trains)."""
        if self._closing.is_set():
            raise EngineError("the engine is shutting down", status=503)
        job = Job(fn, label)
        with self._cond:
            self._jobs.append(job)
            self._cond.notify_all()
        return job.future

    def _run_training(self, item: QueuedRun) -> None:
        """Run ``item`` on this process's devices (the multi-host leader overrides this)."""
        from adapters_lib.train.loop import run_training

        run = item.run
        run_training(run.config(), run.path, control=RunControl(self, item), resume=item.resume)

    def _train(self, item: QueuedRun) -> None:
        """Train one queued run. Whatever fails — its folder removed, a full disk, a mistake in
        its config, a bug — the run is recorded failed with the reason, and the device thread
        goes on to the next."""
        run = item.run
        log.info("run %s: %s", run.run_id, "resuming" if item.resume else "starting")
        handler = None
        try:
            handler = RunLogHandler(self, run, threading.get_ident())
            logging.getLogger().addHandler(handler)
            if item.stop.is_set():
                runs.lifecycle.settle(run, "stopped", "stopped before it started")
                return
            self._run_training(item)
        except runs.RunOwned as e:  # another live process trains it: leave it to that one
            log.warning("run %s not started: %s", run.run_id, e)
        except Exception as e:  # noqa: BLE001 - recorded once (the trainer may have already)
            if isinstance(e, WorkbenchError):
                log.error("run %s failed: %s", run.run_id, e)
            else:
                log.error("run %s failed", run.run_id, exc_info=not runs.lifecycle.failure_recorded(e))
            runs.lifecycle.record_failure(run, e)
        finally:
            if handler is not None:
                logging.getLogger().removeHandler(handler)
                handler.close()
            with self._cond:
                self._active = None
            runs.lifecycle.reconcile(run, here=False)  # never left active by a worker that ended
            log.info("run %s: %s", run.run_id, run.state)
            self.publish_status(run, end=True)

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

    def works_on(self, run: runs.RunDir) -> tuple[bool, bool]:
        """(active here, queued here); call with ``self._cond`` held."""
        active = self._active is not None and self._active.run.path == run.path
        return active, any(q.run.path == run.path for q in self._queue)

    def state_of(self, run: runs.RunDir) -> dict[str, Any]:
        """The run's status, reconciled: an active run nobody works on becomes interrupted."""
        with self._cond:
            status = run.status()
            active, queued = self.works_on(run)
            stop_set = active and self._active is not None and self._active.stop.is_set()
        status = runs.lifecycle.reconcile(run, status, here=active or queued)
        if active:
            if stop_set and status.get("state") == "running":
                status["state"] = "stopping"
        elif queued:
            status["state"] = "queued"
        status.setdefault("run_id", run.run_id)
        return status

    def publish_status(self, run: runs.RunDir, *, end: bool = False) -> None:
        status = self.summary(run).to_json()
        self.hub.publish(run.run_id, "status", status)
        if end:
            self.hub.publish(run.run_id, "end", {"state": status.get("state")})

    def summary(self, run: runs.RunDir) -> api.RunSummary:
        status = self.state_of(run)
        return api.RunSummary.from_json({"id": run.run_id, "dir": str(run.path), **status})

    def _enqueue(self, item: QueuedRun) -> None:
        with self._cond:
            self._queue.append(item)
            self._cond.notify_all()
        self.publish_status(item.run)

    def _config(self, config: dict[str, Any] | None, toml_text: str,
                overrides: tuple[str, ...], source: str) -> RunConfig:
        if config is not None and toml_text:
            raise EngineError("send either config or config_toml, not both", where=source)
        raw: dict[str, Any] = config or {}
        if toml_text:
            try:
                raw = tomllib.loads(toml_text)
            except tomllib.TOMLDecodeError as e:
                line = getattr(e, "lineno", None)
                raise EngineError(f"invalid TOML: {getattr(e, 'msg', e)}",
                                  where=f"{source}:{line}" if line else source) from None
        return config_from_dict(raw, source=source, text=toml_text, overrides=overrides)

    # ----------------------------------------------------------------- commands

    def execute(self, cmd: api.Command) -> Any:
        """Run one command and return its JSON-able result (streams return an iterator)."""
        handler = getattr(self, f"cmd_{cmd.name}", None)
        if handler is None:  # pragma: no cover - every command has a handler
            raise EngineError(f"command {cmd.name!r} is not supported", status=501)
        level = logging.DEBUG if cmd.name in ("status", "list_runs", "get_run") else logging.INFO
        log.log(level, "command %s", json.dumps(_brief(cmd.to_json())))
        if cmd.name not in IMPORT_FREE:
            self.ensure_jax()  # see _import_jax: no import may race gemma's
        return handler(cmd)

    def health(self) -> api.Health:
        thread = self._device_thread
        if thread is None:
            return api.Health(device_thread="starting")
        if thread.is_alive():
            return api.Health(device_thread="alive")
        if self._closing.is_set():
            return api.Health(device_thread="stopped")
        return api.Health(device_thread="dead", error=self._device_error)

    def cmd_status(self, cmd: api.Status) -> api.EngineStatus:
        if cmd.wait:  # for the devices; the heavy modules may still be importing
            if self._warm:
                self._devices_known.wait(300)
            else:
                self.ensure_jax()
        with self._cond:
            active = self._active.run.run_id if self._active else None
            queued = [q.run.run_id for q in self._queue]
            jobs = sum(1 for j in self._jobs if j.label != "heartbeat")  # internal
        devices = self._devices
        jax = sys.modules.get("jax") if self._devices_known.is_set() else None
        if jax is not None and devices:
            devices = [devices_mod.live_memory(d, dev) for d, dev in zip(devices, jax.devices(), strict=False)]
        return api.EngineStatus.from_json({
            "version": __version__,
            "api_version": api.API_VERSION,
            "pid": os.getpid(),
            "started": self.started,
            "uptime_s": round(time.time() - self.started, 3),
            "jax": {"ready": self._devices_known.is_set() and self._jax_error is None,
                    "loading": not self._devices_known.is_set(), "error": self._jax_error,
                    "modules_ready": self._jax_ready.is_set()},
            "backend": self._backend,
            "devices": devices,
            "memory": {"host_bytes": devices_mod.host_bytes(), "engine_rss_bytes": devices_mod.rss_bytes()},
            "busy": active is not None or jobs > 0,
            "active_run": active,
            "queued_runs": queued,
            "pending_jobs": jobs,
            "runs_dir": str(self.runs_root or runs.runs_root()),
            "listen": self.listen,
            # for remote clients (#18): where `train --upload` puts data, which machine this is
            "data_dir": str(paths.data_dir()),
            "host": platform.node(),
        }).replace(health=self.health())

    def cmd_shutdown(self, cmd: api.Shutdown) -> api.ShutdownReply:
        with self._cond:
            active = self._active.run.run_id if self._active else None
        return api.ShutdownReply(stopping=True, active_run=active)

    def cmd_models(self, cmd: api.ListModels) -> api.ModelList:
        return compute.models(cmd.folders)

    def cmd_data_check(self, cmd: api.CheckData) -> api.DataCheckReply:
        cfg = self._config(cmd.config, cmd.config_toml, (), "<data check>")
        return compute.data_check(cfg, cmd.path, cmd.format, cmd.limit)

    def cmd_estimate(self, cmd: api.Estimate) -> api.EstimateReply:
        """Memory per device, mesh problems and trainable params: pure compute, no compile."""
        cfg = self._config(cmd.config, cmd.config_toml, cmd.overrides, cmd.source or "<estimate>")
        self.ensure_jax()
        return api.EstimateReply.from_json(self.estimate_json(cfg))

    def estimate_json(self, cfg: RunConfig) -> dict[str, Any]:
        """The estimate as JSON data (the multi-host leader adds its hosts)."""
        return compute.estimate(cfg, self._devices)

    def cmd_create_run(self, cmd: api.CreateRun) -> api.RunSummary:
        cfg = self._config(cmd.config, cmd.config_toml, cmd.overrides, cmd.source or "<run config>")
        if self._closing.is_set():
            raise EngineError("the engine is shutting down", status=503)
        with self._cond:  # created and queued together (state_of reads both)
            run = self.registry.create(cfg)
            self._queue.append(QueuedRun(run, resume=False))
            self._cond.notify_all()
        self.publish_status(run)
        log.info("run %s queued", run.run_id)
        return self.summary(run)

    def cmd_list_runs(self, cmd: api.ListRuns) -> api.RunList:
        return api.RunList(runs=[self.summary(r) for r in self.all_runs()])

    def cmd_get_run(self, cmd: api.GetRun) -> api.RunDetail:
        run = self.find_run(cmd.run_id)
        out = self.summary(run).to_json()
        try:
            out["config"] = tomllib.loads(run.config_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            out["config"] = None
        out["checkpoints"] = checkpoint_steps(run)
        if cmd.metrics:
            out["metrics"] = run.metrics()
        if cmd.events:
            out["events"] = run.events()
        return api.RunDetail.from_json(out)

    # evals (#20): a sweep's results, from its runs' directories (adapters_lib.sweeps)
    def cmd_list_sweeps(self, cmd: api.ListSweeps) -> api.SweepList:
        from adapters_lib.sweeps import results

        return api.SweepList.from_json({"sweeps": results.list_sweeps(self.all_runs())})

    def cmd_get_sweep(self, cmd: api.GetSweep) -> api.SweepResults:
        from adapters_lib.sweeps import results

        try:
            out = results.summary(self.all_runs(), cmd.sweep_id, cmd.metric)
        except results.NoSuchSweep as e:
            raise EngineError(e.message, status=404, where=e.where, hint=e.hint) from None
        return api.SweepResults.from_json(out)

    def cmd_eval_checkpoints(self, cmd: api.EvalCheckpoints) -> api.EvalTable:
        """Every checkpoint of a run scored (``adapters_lib.evals.checkpoints``), on the device
        thread."""
        from adapters_lib.engine.sampling import run_dir_of
        from adapters_lib.evals.checkpoints import score_checkpoints

        if cmd.data and not Path(cmd.data).is_absolute():
            raise EngineError(f"data {cmd.data!r} is not an absolute path", status=400,
                              where="eval_checkpoints request: data",
                              hint="send an absolute file or folder (the engine's working "
                                   "directory is not yours)")
        run = run_dir_of(self, cmd.run_id)
        future = self.on_device(lambda: score_checkpoints(
            str(run.path), data=cmd.data, metrics=cmd.metrics, batch_size=cmd.batch_size),
            label="eval checkpoints")
        return api.EvalTable.from_json(future.result())

    def cmd_stop_run(self, cmd: api.StopRun) -> api.RunSummary:
        run = self.find_run(cmd.run_id)
        with self._cond:  # queue and state change together (state_of reads both)
            active = self._active if self._active and self._active.run.path == run.path else None
            queued = [q for q in self._queue if q.run.path == run.path]
            for q in queued:
                self._queue.remove(q)
            if queued:
                runs.lifecycle.settle(run, "stopped", "stopped before it started")
        if active is not None:
            # The loop sees it before its next step, checkpoints, and writes stopping/stopped;
            # until then the API reports "stopping" (state_of).
            active.stop.set()
            self.publish_status(run)
        elif queued:
            self.publish_status(run, end=True)
        else:
            state = self.state_of(run).get("state")
            if state in runs.ACTIVE_STATES:  # a live process other than this engine trains it
                owner = runs.lease.owner_of(run)
                who = owner.describe() if owner else "another process"
                raise EngineError(f"run {run.run_id} is {state} in {who}, not in this engine",
                                  status=409, hint="stop it where it runs (Ctrl-C in its terminal"
                                  + (f", or kill -INT {owner.pid}" if owner else "") + ")")
            raise EngineError(f"run {run.run_id} is not running (it is {state})", status=409,
                              hint="resume it with `gemma-workbench runs resume`"
                              if state in runs.RESUMABLE_STATES else None)
        return self.summary(run)

    def cmd_resume_run(self, cmd: api.ResumeRun) -> api.RunSummary:
        run = self.find_run(cmd.run_id)
        state = self.summary(run).state
        if state not in runs.RESUMABLE_STATES:
            raise EngineError(f"run {run.run_id} is {state}; only a stopped, failed or "
                              "interrupted run can be resumed", status=409)
        if self._closing.is_set():
            raise EngineError("the engine is shutting down", status=503)
        resume = bool(checkpoint_steps(run))
        item = QueuedRun(run, resume=resume)
        with self._cond:  # the state and the queue change together (state_of reads both)
            try:
                runs.lease.claim(run, "queued")
                run.set_state("queued", "resume requested" if resume
                              else "restart requested (no checkpoint)")
            except (runs.IllegalTransition, runs.RunOwned) as e:
                raise EngineError(e.message, status=409, hint=e.hint) from None
            self._queue.append(item)
            self._cond.notify_all()
        self.publish_status(run)
        return self.summary(run)

    def cmd_delete_run(self, cmd: api.DeleteRun) -> api.DeleteReply:
        run = self.find_run(cmd.run_id)
        state = self.summary(run).state
        with self._cond:
            busy = (self._active is not None and self._active.run.path == run.path) or any(
                q.run.path == run.path for q in self._queue)
        if busy or state in runs.ACTIVE_STATES:
            raise EngineError(f"run {run.run_id} is {state}; stop it before deleting it",
                              status=409, hint="gemma-workbench runs stop " + run.run_id)
        try:
            self.registry.delete(run)
        except WorkbenchError as e:
            raise EngineError(e.message, status=409, where=e.where, hint=e.hint) from None
        log.info("run %s deleted", run.run_id)
        return api.DeleteReply(id=run.run_id, deleted=True)

    def replay(self, run: runs.RunDir, since_step: int) -> list[dict[str, Any]]:
        """Stream items already on disk: metrics with step > since_step, and every event."""
        items = [{"type": "event", "data": e} for e in run.events()]
        items += [{"type": "metrics", "data": m} for m in run.metrics()
                  if int(m.get("step", 0)) > since_step]
        return items

    # ----------------------------------------------------------------- sampling, export

    def cmd_stream_run(self, cmd: api.StreamRun) -> runs.RunDir:
        """Find the run to stream (the server does the streaming)."""
        return self.find_run(cmd.run_id)

    def prepare_generation(self, cmd: api.Sample | api.Compare | api.CompareSet) -> Any:
        """Check a sample/compare/compare_set request before its stream opens (errors → HTTP
        status); the checks are the generation area's (``engine/sampling.prepare``)."""
        self.ensure_jax()
        log.info("command %s", json.dumps(_brief(cmd.to_json())))
        from adapters_lib.engine import sampling

        return sampling.prepare(self, cmd)

    def execute_stream(self, cmd: api.Sample | api.Compare | api.CompareSet, prepared: Any,
                       emit: Callable[[str, dict], bool]) -> dict[str, Any]:
        """Generate on the device thread, calling ``emit(type, data)`` per chunk.

        ``emit`` returns False when the client is gone: generation stops early.
        """
        from adapters_lib.engine import sampling

        fn = sampling.jobs()[type(cmd)]
        future = self.on_device(lambda: fn(self, cmd, prepared, emit), label=cmd.name)
        return future.result()

    def cmd_eval(self, cmd: api.Eval) -> api.EvalReply:
        """Loss/perplexity on a data file, on the device thread (``engine/sampling``)."""
        from adapters_lib.engine import sampling

        return sampling.evaluate(self, cmd)

    def cmd_export(self, cmd: api.Export) -> api.ExportReply:
        """Checked (a 4xx before the device thread), then written there (``engine/sampling``)."""
        from adapters_lib.engine import sampling

        return sampling.export(self, cmd)


class RunLogHandler(logging.Handler):
    """Log records of the device thread while a run trains → ``log`` stream items + train.log."""

    def __init__(self, engine: Engine, run: runs.RunDir, thread_id: int):
        super().__init__(logging.INFO)
        self.engine = engine
        self.run = run
        self.thread_id = thread_id
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._file = open(run.path / "train.log", "a", encoding="utf-8")  # noqa: SIM115

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread_id:
            return
        try:
            line = self.format(record)
            self._file.write(line + "\n")
            self._file.flush()
            self.engine.hub.publish(self.run.run_id, "log", {
                "time": round(record.created, 3), "level": record.levelname,
                "logger": record.name, "message": record.getMessage()})
        except Exception:  # noqa: BLE001 - logging must never break training
            self.handleError(record)

    def close(self) -> None:
        self._file.close()
        super().close()


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
