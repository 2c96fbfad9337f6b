"""Handlers of the device jobs: sample, compare (streams) and export.

Each checks its request in the request thread (errors become the HTTP status, before a
stream opens), then hands the work to the device thread and returns at once: a
``GenerationStream`` or a future. The jobs themselves are the generation area's
(``engine/sampling.py``, ``engine/checkpoint_jobs.py``).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from adapters_lib.engine import api
from adapters_lib.engine.handlers.table import Emit, GenerationStream, handles, then
from adapters_lib.engine.service import Engine


@handles(api.Sample, api.Compare, api.CompareSet)
def generate(engine: Engine, cmd: Any) -> GenerationStream:
    """Checked here (the generation area's ``sampling.prepare``: a 4xx before the stream
    opens), generated on the device thread (``sampling.jobs()``)."""
    from adapters_lib.engine import sampling

    prepared = sampling.prepare(engine, cmd)
    job = sampling.jobs()[type(cmd)]

    def start(emit: Emit) -> concurrent.futures.Future:
        return engine.scheduler.submit(lambda: job(engine, cmd, prepared, emit), label=cmd.name)

    return GenerationStream(prepared, start)


@handles(api.ListCompares)
def list_compares(engine: Engine, cmd: api.ListCompares) -> api.CompareList:
    """A run's saved compares, read on this machine (where the run is)."""
    from adapters_lib.sample.compare_sets import saved_compares

    run = engine.find_run(cmd.run_id)
    return api.CompareList(compares=saved_compares(run.path, limit=max(0, cmd.limit)))


@handles(api.PrepareCompare)
def prepare_compare(engine: Engine, cmd: api.PrepareCompare) -> api.PrepareCompareReply:
    """Compile the picked run's Compare programs behind (``warm_compare``); answered at once."""
    from adapters_lib.engine import warm_compare
    from adapters_lib.engine.sampling import run_dir_of

    run = run_dir_of(engine, cmd.run_id)  # a 404 for an unknown run
    if not run.checkpoints():
        return api.PrepareCompareReply(message=f"run {run.run_id} has no checkpoint yet")
    if not warm_compare.enabled():
        return api.PrepareCompareReply(message=f"off ({warm_compare.ENV}=0)")
    if not engine.warmer.warm(run, cmd.step):
        return api.PrepareCompareReply(message="the engine is busy: the Compare compiles what it needs")
    return api.PrepareCompareReply(queued=True, message=f"compiling run {run.run_id}'s Compare programs behind")


@handles(api.Export)
def export(engine: Engine, cmd: api.Export) -> concurrent.futures.Future:
    from adapters_lib.engine import checkpoint_jobs

    run, fmt = checkpoint_jobs.check_export(engine, cmd)  # a 4xx before the device thread
    future = engine.scheduler.submit(lambda: checkpoint_jobs.export_job(engine, cmd, run, fmt),
                                     label="export")
    return then(future, api.ExportReply.from_json)


@handles(api.Eval)
def evaluate(engine: Engine, cmd: api.Eval) -> api.EvalResult:
    """Loss/perplexity on a data file (``checkpoint_jobs.eval_job``: its checks, then the
    device thread; it waits in the slow pool, never in the one status uses)."""
    from adapters_lib.engine import checkpoint_jobs

    return api.EvalResult.from_json(checkpoint_jobs.eval_job(engine, cmd))
