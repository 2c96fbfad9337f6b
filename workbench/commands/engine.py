"""``gemma-workbench engine start|stop|status [--json]``: the engine process.

``start`` spawns it detached (own session, logs to the state dir) and waits until it answers;
``start --foreground`` runs it in this terminal (logs here too, Ctrl-C stops it);
``--tcp HOST:PORT`` also listens on TCP, only when asked, and still needs the token.
``stop`` refuses while a run trains unless ``--force`` (the run then stops at its next step,
checkpointed and resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engine", help="start, stop or inspect the engine process",
                       description="The engine owns JAX and the devices; the TUI and the CLI "
                                   "talk to it over a Unix socket with a token.")
    actions = p.add_subparsers(dest="engine_action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start the engine (detached unless --foreground)")
    start.add_argument("--foreground", action="store_true",
                       help="run in this terminal and log here (Ctrl-C stops it)")
    start.add_argument("--tcp", metavar="HOST:PORT",
                       help="also listen on TCP, on a loopback address (token still "
                            "required); prefer --remote HOST")
    start.add_argument("--tcp-any-address", action="store_true",
                       help="allow --tcp on a non-loopback address (plain HTTP: the token "
                            "crosses the network in clear text)")
    start.add_argument("--json", action="store_true", help="print one JSON object")
    start.add_argument("--multihost", action="store_true",
                       help="one engine per host of a multi-host job (jax.distributed; stays in "
                            "the foreground); process 0 serves the API (docs/multihost.md)")
    start.add_argument("--coordinator", metavar="HOST:PORT",
                       help="--multihost off TPU VMs: process 0's address and a free port")
    start.add_argument("--num-processes", type=int, metavar="N", help="--multihost: processes")
    start.add_argument("--process-id", type=int, metavar="I", help="--multihost: this one's rank")
    start.set_defaults(handler=run_start)
    stop = actions.add_parser("stop", help="stop the engine")
    stop.add_argument("--force", action="store_true",
                      help="stop even while a run trains (it stops at its next step, resumable)")
    stop.add_argument("--json", action="store_true", help="print one JSON object")
    stop.set_defaults(handler=run_stop)
    status = actions.add_parser("status", help="is it running; devices, busy, active run")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--wait", action="store_true", help="wait until JAX has started")
    status.set_defaults(handler=run_status)


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "-"


def render_status(s: api.EngineStatus) -> str:
    backend = s.backend or ("starting…" if s.jax.loading else f"error: {s.jax.error}")
    lines = [f"engine {s.version} (API v{s.api_version}) pid {s.pid}, up {s.uptime_s:.0f} s",
             f"  listening  {', '.join(f'{k} {v}' for k, v in s.listen.items())}",
             f"  jax        {backend}, {len(s.devices)} device(s)"]
    kinds: dict[tuple[str, str], int] = {}
    for d in s.devices:
        key = (d.kind, _gib(d.memory_bytes))
        kinds[key] = kinds.get(key, 0) + 1
    lines += [f"             {n}× {kind}  memory {mem}" for (kind, mem), n in kinds.items()]
    lines.append(f"  busy       {'yes' if s.busy else 'no'}" + (f" — run {s.active_run}" if s.active_run else ""))
    if s.queued_runs:
        lines.append(f"  queued     {', '.join(s.queued_runs)}")
    lines.append(f"  runs dir   {s.runs_dir}")
    return "\n".join(lines)


def run_start(args: argparse.Namespace) -> int:
    from adapters_lib.engine.locations import parse_tcp
    from workbench.client import EngineClient
    from workbench.engine_process import engine_files, spawn_engine

    if args.tcp:  # a mistake is one line, before anything starts or is written
        parse_tcp(args.tcp, any_address=args.tcp_any_address)
    tcp_argv = (["--tcp", args.tcp] if args.tcp else []) + (
        ["--tcp-any-address"] if args.tcp_any_address else [])
    if args.multihost:
        from adapters_lib.engine.multihost import main as multihost_main

        argv = (["--foreground"] if args.foreground else []) + tcp_argv
        for flag, value in (("--coordinator", args.coordinator),
                            ("--num-processes", args.num_processes),
                            ("--process-id", args.process_id)):
            if value is not None:
                argv += [flag, str(value)]
        return multihost_main(argv)
    if args.coordinator or args.num_processes is not None or args.process_id is not None:
        raise WorkbenchError("--coordinator, --num-processes and --process-id need --multihost",
                             where="engine start")
    if args.foreground:
        from adapters_lib.engine.daemon import main as engine_main

        return engine_main(["--foreground", *tcp_argv])
    client = EngineClient()
    if client.ping():
        s = client.status()
        if args.tcp and "tcp" not in s.listen:
            raise WorkbenchError("the engine is already running without TCP",
                                 hint="stop it (`gemma-workbench engine stop`) and start it "
                                      "again with --tcp")
        _print(args, s.to_json(), "engine already running\n" + render_status(s))
        return 0
    t0 = time.monotonic()
    proc = spawn_engine(tcp=args.tcp, tcp_any_address=args.tcp_any_address, on_demand=False)
    client.wait_ready(proc=proc)
    seconds = time.monotonic() - t0
    s = client.status()
    _print(args, {**s.to_json(), "start_seconds": round(seconds, 3)},
           f"engine started in {seconds:.1f} s (log: {engine_files()['log']})\n" + render_status(s))
    return 0


STOP_WAIT_S = 180.0
"""How long ``engine stop`` waits for the engine to go: longer than the engine waits for its
run's step (``Engine.shutdown``'s 120 s)."""


def run_stop(args: argparse.Namespace) -> int:
    from workbench.client import EngineClient
    from workbench.engine_process import engine_files

    client = EngineClient()
    if not client.ping():
        _print(args, {"running": False}, "engine not running")
        return 0
    s = client.status()
    if s.active_run and not args.force:
        raise WorkbenchError(f"run {s.active_run} is training", where="engine stop",
                             hint="stop the run first (`gemma-workbench runs stop ID`), or use "
                                  "--force (the run checkpoints and can be resumed)")
    if s.active_run:  # its step (or its first compile) ends first: say why this waits
        print(f"run {s.active_run} stops at its next step (it checkpoints, resumable); "
              "the engine exits after it", file=sys.stderr)
    client.shutdown()
    t0 = time.monotonic()
    while client.ping():
        if time.monotonic() - t0 > STOP_WAIT_S:
            raise WorkbenchError(
                f"the engine (pid {s.pid}) still answers {STOP_WAIT_S:.0f} s after it was asked "
                "to stop", where="engine stop",
                hint=f"it may still be in a long step: see {engine_files()['log']}; `kill -9 "
                     f"{s.pid}` ends it (the run resumes from its last checkpoint)")
        time.sleep(0.1)
    _pid_gone(s.pid)
    _print(args, {"running": False, "stopped_pid": s.pid}, f"engine stopped (pid {s.pid})")
    return 0


def _pid_gone(pid: int, timeout: float = 30.0) -> None:
    """Wait until ``pid`` has exited (a zombie not yet reaped by its parent counts as gone)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (OSError, IndexError):
            pass
        time.sleep(0.1)


def run_status(args: argparse.Namespace) -> int:
    from workbench.client import EngineClient

    client = EngineClient()
    if not client.ping():
        _print(args, {"running": False}, "engine not running (start it with "
               "`gemma-workbench engine start`)")
        return 1
    s = client.status(wait=args.wait)
    _print(args, {**s.to_json(), "running": True}, render_status(s))
    return 0


def _print(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data))
    else:
        print(text)
    sys.stdout.flush()
