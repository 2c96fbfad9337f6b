"""Handlers of the run commands: create, list, get, stop, resume, delete, stream.

None needs JAX: they read run directories (``adapters_lib.runs``) and ask the engine's
``RunQueue`` for every change of the queue and a run's state.
"""

from __future__ import annotations

import logging
import tomllib

from adapters_lib import runs
from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.handlers.table import handles
from adapters_lib.engine.service import Engine
from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.engine")


def _open(engine: Engine) -> None:
    if engine.scheduler.closing.is_set():
        raise EngineError("the engine is shutting down", status=503)


def _check_model(cfg) -> None:
    """A model the run's route cannot find or read, or a ``[model] quantize`` it cannot take, is
    refused before a run folder exists (a detached run, a sweep point or the TUI's launch would
    otherwise leave a failed run behind). Metadata only: the catalog entry and its status, no
    weights, no tokenizer build."""
    from adapters_lib import catalog

    if cfg.model.backend == "keras":
        from adapters_lib.keras_route.model import keras_entry

        keras_entry(cfg)
        return
    if cfg.model.backend != "gemma":
        return
    from adapters_lib.models.weights import check_loadable, check_quantize

    entry = catalog.find(cfg.model.source)
    if cfg.model.source != "demo":
        check_loadable(entry, cfg.model.tokenizer, build_tokenizer=False)
    check_quantize(entry, cfg.model.quantize, cfg.model.quantize_tile_size,
                   cfg.model.quantize_embedding)


@handles(api.CreateRun)
def create_run(engine: Engine, cmd: api.CreateRun) -> api.RunSummary:
    cfg = engine.config_of(cmd.config, cmd.config_toml, cmd.overrides,
                           cmd.source or "<run config>")
    _check_model(cfg)
    _open(engine)
    run = engine.run_queue.create(cfg)
    engine.ahead.remember(cfg)  # compiled ahead at the engine's next start
    engine.publish_status(run)
    log.info("run %s queued", run.run_id)
    return engine.summary(run)


@handles(api.ListRuns)
def list_runs(engine: Engine, cmd: api.ListRuns) -> api.RunList:
    return api.RunList(runs=[engine.summary(r) for r in engine.all_runs()])


@handles(api.GetRun)
def get_run(engine: Engine, cmd: api.GetRun) -> api.RunDetail:
    run = engine.find_run(cmd.run_id)
    out = engine.summary(run).to_json()
    try:
        out["config"] = tomllib.loads(run.config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        out["config"] = None
    out["checkpoints"] = run.checkpoints()
    if cmd.metrics:
        out["metrics"] = run.metrics()
    if cmd.events:
        out["events"] = run.events()
    return api.RunDetail.from_json(out)


@handles(api.StopRun)
def stop_run(engine: Engine, cmd: api.StopRun) -> api.RunSummary:
    run = engine.find_run(cmd.run_id)
    stopped = engine.run_queue.stop(run)
    if stopped == "active":
        # The loop sees it before its next step, checkpoints, and writes stopping/stopped;
        # until then the API reports "stopping" (RunQueue.state).
        engine.publish_status(run)
    elif stopped == "queued":
        engine.publish_status(run, end=True)
    else:
        state = engine.state_of(run).get("state")
        if state in runs.ACTIVE_STATES:  # a live process other than this engine trains it
            owner = runs.lease.owner_of(run)
            who = owner.describe() if owner else "another process"
            raise EngineError(f"run {run.run_id} is {state} in {who}, not in this engine",
                              status=409, hint="stop it where it runs (Ctrl-C in its terminal"
                              + (f", or kill -INT {owner.pid}" if owner else "") + ")")
        raise EngineError(f"run {run.run_id} is not running (it is {state})", status=409,
                          hint="resume it with `gemma-workbench runs resume`"
                          if state in runs.RESUMABLE_STATES else None)
    return engine.summary(run)


@handles(api.ResumeRun)
def resume_run(engine: Engine, cmd: api.ResumeRun) -> api.RunSummary:
    run = engine.find_run(cmd.run_id)
    state = engine.summary(run).state
    if state not in runs.RESUMABLE_STATES:
        raise EngineError(f"run {run.run_id} is {state}; only a stopped, failed or "
                          "interrupted run can be resumed", status=409)
    _open(engine)
    resume = bool(run.checkpoints())
    engine.run_queue.resume(run, resume)
    engine.publish_status(run)
    return engine.summary(run)


@handles(api.DeleteRun)
def delete_run(engine: Engine, cmd: api.DeleteRun) -> api.DeleteReply:
    run = engine.find_run(cmd.run_id)
    state = engine.summary(run).state
    # a run that just ended (stopped) may not be released yet: wait for its loop to let go
    busy = engine.run_queue.busy_with(run, settle_s=30 if state not in runs.ACTIVE_STATES else 0)
    if busy or state in runs.ACTIVE_STATES:
        raise EngineError(f"run {run.run_id} is {state}; stop it before deleting it",
                          status=409, hint="gemma-workbench runs stop " + run.run_id)
    try:
        engine.registry.delete(run)
    except WorkbenchError as e:
        raise EngineError(e.message, status=409, where=e.where, hint=e.hint) from None
    log.info("run %s deleted", run.run_id)
    return api.DeleteReply(id=run.run_id, deleted=True)


@handles(api.StreamRun)
def stream_run(engine: Engine, cmd: api.StreamRun) -> runs.RunDir:
    """Find the run to stream (the server does the streaming)."""
    return engine.find_run(cmd.run_id)
