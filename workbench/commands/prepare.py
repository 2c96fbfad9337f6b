"""``gemma-workbench prepare [CONFIG.toml] [--set key=value …] [--detach] [--force] [--json]``.

Asks the engine (started on demand) to compile the config's programs ahead — its first train
step and its eval steps, on the engine's one compile thread — so that ``train`` with the same
config (or one of its LoRA family: another rank in the bucket, alpha, targets, lr) starts
without waiting for XLA. Without ``--detach`` it follows the jobs until each is ready, one line
per state change on stdout (``train step: compiling``, ``train step: ready (88.1 s)``);
``--json`` prints the jobs at the end instead (``compile_jobs``'s reply, contract).

A CPU engine compiles nothing ahead (the programs compile at launch): it says so, exit 0;
``--force`` compiles ahead there too. Exit status 1 when a compile failed, 2 for a mistake in the
config (one line: what, where, what to do). Ctrl-C stops following; the compiles go on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from adapters_lib.errors import WorkbenchError

POLL_S = 0.5
LIVE = ("queued", "compiling")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare", help="compile a run config's programs ahead, so that its launch waits for no compile",
        description="Compile the programs a run config will need (train step, eval steps) on the "
                    "engine's compile thread, ahead of `train`. Without CONFIG the demo defaults.")
    p.add_argument("config", nargs="?", metavar="CONFIG.toml", help="the run config (default: demo)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set lora.rank=16 (repeatable)")
    p.add_argument("--detach", action="store_true", help="queue the compiles and return at once")
    p.add_argument("--force", action="store_true",
                   help="compile ahead on a CPU engine too (by default it compiles at launch there)")
    p.add_argument("--json", action="store_true",
                   help="print the jobs at the end as one JSON object (compile_jobs' reply)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from adapters_lib.config.model_defaults import load_with_model_defaults
    from workbench.commands._generation_args import engine_client
    from workbench.commands.train import engine_config

    loaded = load_with_model_defaults(args.config, args.overrides)
    if loaded.added:  # as train sends them
        args.overrides = [*loaded.added, *args.overrides]
    text, overrides = engine_config(args, loaded.config)
    with engine_client() as client:
        reply = client.compile_ahead(config_toml=text, overrides=overrides, force=args.force,
                                     source=args.config or "<demo defaults>")
        if not reply.ahead or reply.request is None:
            _say(args, f"nothing compiles ahead: {reply.message}", reply.to_json())
            return 0
        req = reply.request
        if not args.json:
            print(f"compiling ahead: {req.about} (request {req.request})", flush=True)
        if args.detach:
            if args.json:
                print(json.dumps(reply.to_json()))
            return 0
        try:
            return follow(client, req.request, args.json)
        except KeyboardInterrupt:
            print("stopped following; the compiles go on (gemma-workbench prepare shows them again)",
                  file=sys.stderr)
            return 130


def follow(client: Any, request: int, as_json: bool = False) -> int:
    """Poll the request's jobs until none is queued or compiling; a line per state change."""
    shown: dict[Any, str] = {}
    while True:
        reply = client.compile_jobs(request)
        latest = reply.latest if reply.latest is not None and reply.latest.request == request else None
        state = latest.state if latest is not None else "superseded"
        if shown.get("request") != state:
            shown["request"] = state
            if state in ("deferred", "planning", "failed", "superseded") and not as_json:
                what = {"planning": "setting up (model, data, steps)"}.get(state, state)
                print(f"{what}: {latest.message}" if latest and latest.message else what, flush=True)
        for job in reply.jobs:
            if shown.get(job.id) != job.state:
                shown[job.id] = job.state
                if not as_json:
                    print(job_line(job), flush=True)
        if state == "failed":
            raise WorkbenchError(latest.message if latest else "the compile ahead failed",
                                 where="prepare", hint="fix the config, then prepare it again")
        settled = state in ("planned", "superseded") and not any(j.state in LIVE for j in reply.jobs)
        if settled:
            if as_json:
                print(json.dumps(reply.to_json()))
            return 1 if any(j.state == "failed" for j in reply.jobs) else 0
        time.sleep(POLL_S)


def job_line(job: Any) -> str:
    """``train step: ready (88.1 s)`` — what, its state, and for how long where it says."""
    took = f" ({job.seconds:.1f} s)" if job.seconds is not None and job.state in ("ready", "failed") else ""
    if job.state == "ready" and job.seconds is None:
        took = " (compiled before)"
    error = f": {job.error}" if job.error else ""
    return f"{job.what}: {job.state}{took}{error}"


def _say(args: argparse.Namespace, line: str, data: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(data))
    else:
        print(line, file=sys.stderr)
