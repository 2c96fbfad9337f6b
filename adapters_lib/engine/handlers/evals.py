"""Handlers of the evaluation area's commands: sweeps' results and checkpoints scored.

- ``ListSweeps``, ``GetSweep``: a sweep's results, read from its runs' directories
  (``adapters_lib.sweeps.results``); no JAX.
- ``EvalCheckpoints``: the base and every checkpoint of a run scored
  (``adapters_lib.evals.checkpoints``) on the device thread; the request is checked here
  (a 4xx before any device work) and the handler returns the job's future, so no request
  thread waits for it.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.handlers.table import handles, then
from adapters_lib.engine.service import Engine


@handles(api.ListSweeps)
def list_sweeps(engine: Engine, cmd: api.ListSweeps) -> api.SweepList:
    from adapters_lib.sweeps import results

    return api.SweepList.from_json({"sweeps": results.list_sweeps(engine.all_runs())})


@handles(api.GetSweep)
def get_sweep(engine: Engine, cmd: api.GetSweep) -> api.SweepResults:
    from adapters_lib.sweeps import results

    try:
        out = results.summary(engine.all_runs(), cmd.sweep_id, cmd.metric)
    except results.NoSuchSweep as e:
        raise EngineError(e.message, status=404, where=e.where, hint=e.hint) from None
    return api.SweepResults.from_json(out)


@handles(api.EvalCheckpoints)
def eval_checkpoints(engine: Engine, cmd: api.EvalCheckpoints) -> concurrent.futures.Future:
    from adapters_lib.engine.sampling import run_dir_of
    from adapters_lib.evals.checkpoints import score_checkpoints

    if cmd.data and not Path(cmd.data).is_absolute():
        raise EngineError(f"data {cmd.data!r} is not an absolute path", status=400,
                          where="eval_checkpoints request: data",
                          hint="send an absolute file or folder (the engine's working "
                               "directory is not yours)")
    run = run_dir_of(engine, cmd.run_id)
    future = engine.on_device(lambda: score_checkpoints(
        str(run.path), data=cmd.data, metrics=cmd.metrics, batch_size=cmd.batch_size),
        label="eval checkpoints")
    return then(future, api.EvalTable.from_json)
