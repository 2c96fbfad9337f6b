"""The engine on every host of a multi-host job (``gemma-workbench engine start --multihost``).

Every process initialises ``jax.distributed`` (``adapters_lib.multihost.initialize``) and
runs an engine; the mesh of a run spans every global device.

- Process 0 runs the normal engine (``LeaderEngine``: the API on its Unix socket, the TUI and
  CLI attach to it as usual). Its device thread sends every device-touching step of the
  SPMD program to the others through ``multihost.Bus`` *before* running it, as a command's
  ``to_json()`` (``multihost.messages``): ``Train`` when a run starts, then one ``Step`` a
  step (the stop decision, so every process leaves the loop at the same step), ``Heartbeat``
  every few seconds while idle, ``Stop`` at the end, and ``OnEveryProcess`` around an API
  command that every process must run (export: its checkpoint restores wait on every
  process). Sampling (base model, or a run's checkpoint restored by process 0 alone:
  ``checkpoints.restore_params`` is process-local) runs on process 0's own first device, so
  it needs no broadcast.
  ``daemon.serve`` builds this engine through its ``engine_factory`` argument.
- Processes ≠ 0 run ``run_follower``: no API; they execute each message with the same code
  (``multihost.train_one``; an export into a folder of their own, thrown away), writing no
  metrics, events or status (``FollowerRunDir``), and call orbax's save/restore on the
  shared ``checkpoints/`` with process 0.
- A ``multihost.Watchdog`` in every process notices a lost process: process 0 marks the
  active run ``interrupted``, and every process exits (restart all of them, then resume).

The run directories must be on storage every host sees at the same path (NFS, Filestore,
gcsfuse): orbax's multi-host checkpoints are written by all processes into one directory.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import logging
import os
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

from adapters_lib import multihost, paths, runs
from adapters_lib.engine import api
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.handlers import then
from adapters_lib.engine.run_queue import QueuedRun
from adapters_lib.engine.service import Engine
from adapters_lib.engine.training import RunControl
from adapters_lib.errors import WorkbenchError
from adapters_lib.import_shields import tf_deferred
from adapters_lib.multihost import messages

log = logging.getLogger("adapters_lib.engine")

HEARTBEAT_S = 10.0


class LeaderEngine(Engine):
    """Process 0's engine: ``Engine`` plus the broadcasts of the SPMD program."""

    def __init__(self, *, bus: multihost.Bus | None = None, heartbeat_s: float = HEARTBEAT_S,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.bus = bus or multihost.Bus()
        self.heartbeat_s = heartbeat_s
        self._beat_stop = threading.Event()
        self.watchdog: multihost.Watchdog | None = None
        self.handlers[api.Export] = lambda engine, cmd: engine._export(cmd)

    def start(self) -> None:
        super().start()
        self.watchdog = multihost.Watchdog(self._on_lost).start()
        threading.Thread(target=self._beat, name="multihost-beat", daemon=True).start()

    def _beat(self) -> None:
        while not self._beat_stop.wait(self.heartbeat_s):
            try:
                self.on_device(self._idle_heartbeat, label="heartbeat", internal=True)
            except WorkbenchError:  # shutting down
                return

    def _idle_heartbeat(self) -> None:
        if self.run_queue.training() is None:  # a run's step messages are its heartbeat
            self.bus.send_command(messages.Heartbeat(time=time.time()))

    def _on_lost(self, reason: str) -> None:
        active = self.run_queue.training()
        if active is not None:
            multihost.mark_interrupted(active.run, reason, force=True)

    def estimate_json(self, cfg: Any, device: str = "") -> dict[str, Any]:
        """The estimate, plus the hosts: per-host devices and bytes, multi-host mesh problems."""
        out = super().estimate_json(cfg, device)
        n, hosts = len(self.runtime.devices), multihost.process_count()
        problems = [p.to_dict() for p in multihost.validate_hosts(cfg.mesh, global_devices=n,
                                                                 processes=hosts)]
        out["mesh_problems"] = out["mesh_problems"] + problems
        out["ok"] = out["ok"] and not any(p["level"] == "error" for p in problems)
        if out.get("estimate"):
            from adapters_lib.memory import estimate as memory

            est = memory.MemoryEstimate(**{k: v for k, v in out["estimate"].items()
                                           if k not in ("total", "fraction", "verdict")})
            out["hosts"] = multihost.per_host_summary(est, global_devices=n, processes=hosts)
            out["summary"] = f"{out['summary']}; {out['hosts']['line']}"
        return out

    def _export(self, cmd: api.Export) -> concurrent.futures.Future:
        """Export on every process: its restores (merged weights, orbax catalog loaders) end
        in barriers over every process of the job. Checked here first (a 4xx before anything
        is broadcast), then ``OnEveryProcess`` goes out and process 0 exports."""
        from adapters_lib.engine import checkpoint_jobs

        run, fmt = checkpoint_jobs.check_export(self, cmd)

        def job() -> dict[str, Any]:
            active = self.run_queue.training()
            if active is not None:  # between two steps: the others are in the loop, waiting
                raise EngineError(  # for a Step message
                    f"run {active.run.run_id} is training on every process",
                    status=409, where="export request",
                    hint="export when it ends (or stop it: it checkpoints and can resume)")
            self.bus.send_command(messages.OnEveryProcess(request=cmd.to_json(),
                                                          run_dir=str(run.path.resolve())))
            return checkpoint_jobs.export_job(self, cmd, run, fmt)

        return then(self.scheduler.submit(job, label="export"), api.ExportReply.from_json)

    def run_training(self, item: QueuedRun) -> None:
        """The run broadcast to every process, then trained on all of them: every process
        leaves the loop at the same step; a lost peer means ``interrupted``.

        The ``train`` message goes out here (inside ``training.train``, after its own checks)
        and its ``stop`` is the decision process 0 acts on, so process 0 and the others
        always agree on whether the run starts.
        """
        from adapters_lib.evals.hooks import default_hooks
        from adapters_lib.train.loop import run_training

        run = item.run
        stop = item.stop.is_set()
        self.bus.send_command(messages.Train(run_dir=str(run.path.resolve()),
                                             resume=item.resume, stop=stop))
        if stop:  # the others skip it too
            runs.lifecycle.settle(run, "stopped", "stopped before it started")
            return
        log.info("run %s on %d processes", run.run_id, multihost.process_count())
        run.write_status("running", pid=os.getpid(), processes=multihost.process_count())
        control = multihost.SyncedControl(self.bus, RunControl(self, item))
        try:
            run_training(run.config(), run.path, control=control, resume=item.resume, hooks=default_hooks)
        except Exception as e:
            if multihost.lost_peer(e):
                multihost.mark_interrupted(run, f"{type(e).__name__}", force=True)
                return
            raise

    def shutdown(self, timeout: float = 120.0) -> None:
        self._beat_stop.set()
        super().shutdown(timeout)  # the active run stops at its next step, on every process
        if self.watchdog is not None:
            self.watchdog.stop()
        try:
            self.bus.send_command(messages.Stop())  # the device thread has ended: no race
        except Exception:  # noqa: BLE001 - the followers may be gone already
            log.warning("multi-host: could not tell the other processes to stop", exc_info=True)


def run_follower(bus: multihost.Bus | None = None) -> int:
    """A process ≠ 0: execute process 0's commands until ``Stop``."""
    bus = bus or multihost.Bus()
    watchdog = multihost.Watchdog().start()
    try:
        while True:
            msg = bus.receive_command()
            if isinstance(msg, messages.Heartbeat):
                continue
            if isinstance(msg, messages.Stop):
                log.info("multi-host: process 0 asked to stop")
                return 0
            handler = FOLLOWER_HANDLERS.get(type(msg))
            if handler is None:
                log.error("multi-host: unexpected message %r", msg.name)
                continue
            try:
                handler(msg, bus)
            except Exception:  # noqa: BLE001 - process 0 reports it; stay in step
                log.exception("multi-host: %s failed here", msg.name)
    finally:
        watchdog.stop()


def _follow_train(msg: messages.Train, bus: multihost.Bus) -> None:
    if not msg.stop:  # else process 0 does not start it either
        multihost.train_one(Path(msg.run_dir), resume=msg.resume, bus=bus)


def _follow_export(cmd: api.Export, run_dir: str) -> None:
    """Process 0's export, run here for its collectives, into a folder thrown away after."""
    from adapters_lib.engine import checkpoint_jobs

    run = multihost.run_dir_for(run_dir)
    here = types.SimpleNamespace(find_run=lambda run_id: run)
    with tempfile.TemporaryDirectory(prefix="gemma-workbench-export-") as tmp:
        local = cmd.replace(out=str(Path(tmp) / "out"), force=False)
        _, fmt = checkpoint_jobs.check_export(here, local)
        checkpoint_jobs.export_job(here, local, run, fmt)
    log.info("multi-host: export of run %s done here", run.run_id)


FOLLOWED_COMMANDS: dict[type[api.Command], Any] = {api.Export: _follow_export}
"""API commands a follower runs when process 0 sends them in ``OnEveryProcess``."""


def _follow_every(msg: messages.OnEveryProcess, bus: multihost.Bus) -> None:
    cmd = msg.api_command()
    follow = FOLLOWED_COMMANDS.get(type(cmd))
    if follow is None:
        raise EngineError(f"{cmd.name} is not run on every process", status=501)
    follow(cmd, msg.run_dir)


FOLLOWER_HANDLERS: dict[type[api.Command], Any] = {
    messages.Train: _follow_train, messages.OnEveryProcess: _follow_every}


def main(argv: list[str] | None = None) -> int:
    """``python -m adapters_lib.engine.multihost [--coordinator H:P --num-processes N
    --process-id I] [--foreground] [--tcp HOST:PORT]``."""
    from adapters_lib.engine import daemon

    parser = argparse.ArgumentParser(prog="gemma-workbench engine start --multihost")
    parser.add_argument("--coordinator", metavar="HOST:PORT")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--foreground", action="store_true")
    parser.add_argument("--tcp", metavar="HOST:PORT")
    parser.add_argument("--tcp-any-address", action="store_true")
    args = parser.parse_args(argv)
    tf_deferred.install()  # gemma's model code imports TensorFlow, which this process never runs
    if args.tcp:  # before jax.distributed waits for the other processes
        daemon.parse_tcp(args.tcp, any_address=args.tcp_any_address)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    info = multihost.initialize(coordinator=args.coordinator, num_processes=args.num_processes,
                                process_id=args.process_id)
    if not multihost.is_primary():
        log_path = paths.state_dir() / f"engine-process-{info['process_index']}.log"
        daemon._setup_logging(log_path, args.foreground)
        log.info("multi-host follower %d of %d (%d local / %d global devices)",
                 info["process_index"], info["process_count"], info["local_devices"],
                 info["global_devices"])
        return run_follower()
    return _serve_leader(args, daemon)


def _serve_leader(args: argparse.Namespace, daemon: Any) -> int:
    """``daemon.main`` for process 0, serving a ``LeaderEngine`` (``engine_factory``)."""
    f = daemon.files()
    lock, held_by = daemon.take_lock(f)
    if lock is None:
        raise WorkbenchError(f"an engine is already running on this host (pid {held_by})",
                             hint="stop it (`gemma-workbench engine stop`) first")
    daemon._setup_logging(f["log"], args.foreground)
    daemon.write_private(f["pid"], f"{os.getpid()}\n")
    factory = functools.partial(LeaderEngine, bus=multihost.Bus())
    try:
        return asyncio.run(daemon.serve(foreground=args.foreground, tcp=args.tcp, warm=True,
                                        tcp_any_address=args.tcp_any_address,
                                        engine_factory=factory))
    except Exception:
        log.exception("engine crashed")
        return 1
    finally:
        for held in lock:
            os.close(held)


if __name__ == "__main__":
    import sys

    sys.exit(main())
