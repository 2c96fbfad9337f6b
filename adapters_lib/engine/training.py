"""How the engine trains one queued run on the device thread.

``train(host, item)``: the run's log lines go to its ``train.log`` and to the run stream
(``RunLogHandler``); the trainer gets a ``RunControl`` (stop requests, metrics and events to
the hub, device jobs served between steps). Whatever fails — the run's folder removed, a
full disk, a mistake in its config, a bug — is recorded once by
``runs.lifecycle.record_failure`` and the device thread goes on to the next run. When it
ends, the scheduler's ``finish`` (``Engine.run_ended``) releases the run once.

``host`` is the engine as this module sees it (``TrainingHost``): the hub, the scheduler,
``publish_status`` and ``run_training``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from adapters_lib import runs
from adapters_lib.engine.hub import Hub
from adapters_lib.engine.run_queue import QueuedRun
from adapters_lib.engine.scheduler import Scheduler
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine")


class TrainingHost(Protocol):
    hub: Hub
    scheduler: Scheduler

    def publish_status(self, run: runs.RunDir, *, end: bool = False) -> None: ...

    def run_training(self, item: QueuedRun) -> None: ...


class RunControl:
    """The ``TrainControl`` the engine hands to ``run_training`` (duck-typed)."""

    def __init__(self, engine: TrainingHost, item: QueuedRun):
        self.engine = engine
        self.item = item
        self.run_id = item.run.run_id

    def should_stop(self) -> bool:
        return self.item.stop.is_set() or self.engine.scheduler.closing.is_set()

    def on_metrics(self, record: dict[str, Any]) -> None:
        self.engine.hub.publish(self.run_id, "metrics", jsonable(record))

    def on_event(self, record: dict[str, Any]) -> None:
        record = jsonable(record)
        self.engine.hub.publish(self.run_id, "event", record)
        if record.get("kind") == "state":
            self.engine.publish_status(self.item.run)

    def between_steps(self) -> None:
        self.engine.scheduler.drain_jobs()


def jsonable(record: dict[str, Any]) -> dict[str, Any]:
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


def run_here(engine: TrainingHost, item: QueuedRun) -> None:
    """Train ``item`` on this process's devices (the multi-host leader trains it on all)."""
    from adapters_lib import paths
    from adapters_lib.engine import device_trace, sampling
    from adapters_lib.evals.hooks import default_hooks
    from adapters_lib.train import step_programs
    from adapters_lib.train.loop import run_training

    if sampling.forget_all not in step_programs.RELEASERS:  # a step with no room drops Compare's models
        step_programs.RELEASERS.append(sampling.forget_all)
    run = item.run
    starts = [x for x in (getattr(engine, "warmer", None), getattr(engine, "ahead", None)) if x is not None]

    def hooks(cfg: Any) -> list[Any]:  # queued at the start: the Compare's sampler, the neighbouring lengths
        return [*default_hooks(cfg), *(x.start_hook(cfg) for x in starts)]

    with device_trace.maybe_trace(paths.state_dir() / "traces"):  # GEMMA_WORKBENCH_TRACE_RUNS
        run_training(run.config(), run.path, control=RunControl(engine, item), resume=item.resume,
                     hooks=hooks)


def train(engine: TrainingHost, item: QueuedRun) -> None:
    """Train one queued run; a failure is the run's, never the device thread's."""
    run = item.run
    log.info("run %s: %s", run.run_id, "resuming" if item.resume else "starting")
    handler = None
    try:
        handler = RunLogHandler(engine, run, threading.get_ident())
        logging.getLogger().addHandler(handler)
        if item.stop.is_set():
            runs.lifecycle.settle(run, "stopped", "stopped before it started")
            return
        engine.run_training(item)
    except runs.RunOwned as e:  # another live process trains it: leave it to that one
        log.warning("run %s not started: %s", run.run_id, e)
    except Exception as e:  # noqa: BLE001 - recorded once (the trainer may have already)
        if isinstance(e, WorkbenchError):
            log.error("run %s failed: %s", run.run_id, e)
        else:
            log.error("run %s failed", run.run_id,
                      exc_info=not runs.lifecycle.failure_recorded(e))
        runs.lifecycle.record_failure(run, e)
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()


class RunLogHandler(logging.Handler):
    """Log records of the device thread while a run trains → ``log`` stream items + train.log."""

    def __init__(self, engine: TrainingHost, run: runs.RunDir, thread_id: int):
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
        self.engine.hub.forget_logs(self.run.run_id)  # the run is over: its train.log keeps them
        super().close()
