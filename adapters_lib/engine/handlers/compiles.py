"""Handlers of the compile queue's commands: compile a config's programs ahead, and the
queue's jobs. ``engine.compile_ahead.AheadCompiler`` decides and queues; nothing here waits
for a compile."""

from __future__ import annotations

from adapters_lib.engine import api
from adapters_lib.engine.handlers.table import handles
from adapters_lib.engine.service import Engine


@handles(api.CompileAhead)
def compile_ahead(engine: Engine, cmd: api.CompileAhead) -> api.CompileAheadReply:
    cfg = engine.config_of(cmd.config, cmd.config_toml, cmd.overrides, cmd.source or "<compile ahead>")
    return engine.ahead.request(cfg, force=cmd.force)


@handles(api.ListCompileJobs)
def compile_jobs(engine: Engine, cmd: api.ListCompileJobs) -> api.CompileJobs:
    return engine.ahead.jobs(cmd.request)
