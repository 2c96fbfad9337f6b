"""Handlers of what the engine knows: status, shutdown, the catalog, data check, estimate.
Only the estimate needs JAX. (The evaluation area's sweeps are in ``handlers/evals.py``.)"""

from __future__ import annotations

import os
import platform
import time

from adapters_lib import __version__, paths, runs
from adapters_lib.engine import api, compute
from adapters_lib.engine import devices as devices_mod
from adapters_lib.engine.handlers.table import handles
from adapters_lib.engine.service import Engine


@handles(api.Status)
def status(engine: Engine, cmd: api.Status) -> api.EngineStatus:
    if cmd.wait:  # for the devices; the heavy modules may still be importing
        engine.runtime.wait_devices()
    active, queued, jobs = engine.scheduler.snapshot()
    return api.EngineStatus(
        version=__version__, api_version=api.API_VERSION, pid=os.getpid(),
        started=engine.started, uptime_s=round(time.time() - engine.started, 3),
        jax=engine.runtime.jax_state(), backend=engine.runtime.backend,
        devices=engine.runtime.device_rows(),
        memory=api.HostMemory(host_bytes=devices_mod.host_bytes(),
                              engine_rss_bytes=devices_mod.rss_bytes()),
        busy=active is not None or jobs > 0, active_run=active, queued_runs=queued,
        pending_jobs=jobs, runs_dir=str(engine.runs_root or runs.runs_root()),
        listen=dict(engine.listen), health=engine.scheduler.health(),
        # for remote clients: where `train --upload` puts data, which machine this is
        data_dir=str(paths.data_dir()), host=platform.node(), warming=engine.warmer.current)


@handles(api.Shutdown)
def shutdown(engine: Engine, cmd: api.Shutdown) -> api.ShutdownReply:
    active, _, _ = engine.scheduler.snapshot()
    return api.ShutdownReply(stopping=True, active_run=active)


@handles(api.ListModels)
def models(engine: Engine, cmd: api.ListModels) -> api.ModelList:
    return compute.models(cmd.folders)


@handles(api.CheckData)
def data_check(engine: Engine, cmd: api.CheckData) -> api.DataCheckReply:
    cfg = engine.config_of(cmd.config, cmd.config_toml, (), "<data check>")
    return compute.data_check(cfg, cmd.path, cmd.format, cmd.limit)


@handles(api.Estimate)
def estimate(engine: Engine, cmd: api.Estimate) -> api.EstimateReply:
    """Memory per device, mesh problems and trainable params: pure compute, no compile."""
    cfg = engine.config_of(cmd.config, cmd.config_toml, cmd.overrides,
                           cmd.source or "<estimate>")
    return api.EstimateReply.from_json(engine.estimate_json(cfg, cmd.device))
