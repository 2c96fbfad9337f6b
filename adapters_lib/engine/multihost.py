"""The engine on every host of a multi-host job (``gemma-workbench engine start --multihost``).

Every process initialises ``jax.distributed`` (``adapters_lib.multihost.initialize``) and
runs an engine; the mesh of a run spans every global device.

- Process 0 runs the normal engine (``LeaderEngine``: the API on its Unix socket, the TUI and
  CLI attach to it as usual). Its device thread sends every device-touching step of the
  SPMD program to the others through ``multihost.Bus`` *before* running it: ``train`` (run
  dir, resume) when a run starts, then one ``step`` message a step (the stop decision, so
  every process leaves the loop at the same step), ``heartbeat`` every few seconds while
  idle, ``shutdown`` at the end. Sampling (base model, or a run's checkpoint restored by
  process 0 alone: ``checkpoints.restore_params`` is process-local) runs on process 0's own
  first device, so it needs no broadcast; export is refused (its restore paths wait on every
  process: it would hang).
  ``daemon.serve`` builds this engine through its ``engine_factory`` argument.
- Processes ≠ 0 run ``run_follower``: no API; they execute each message with the same code
  (``multihost.train_one``), writing no metrics, events or status (``FollowerRunDir``), and
  call orbax's save/restore on the shared ``checkpoints/`` with process 0.
- A ``multihost.Watchdog`` in every process notices a lost process: process 0 marks the
  active run ``interrupted``, and every process exits (restart all of them, then resume).

The run directories must be on storage every host sees at the same path (NFS, Filestore,
gcsfuse): orbax's multi-host checkpoints are written by all processes into one directory.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from adapters_lib import multihost, paths
from adapters_lib.engine.errors import EngineError
from adapters_lib.engine.service import Engine, QueuedRun, RunControl
from adapters_lib.errors import WorkbenchError

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

    def start(self) -> None:
        super().start()
        self.watchdog = multihost.Watchdog(self._on_lost).start()
        threading.Thread(target=self._beat, name="multihost-beat", daemon=True).start()

    def _beat(self) -> None:
        while not self._beat_stop.wait(self.heartbeat_s):
            try:
                self.on_device(self._idle_heartbeat, label="heartbeat")
            except WorkbenchError:  # shutting down
                return

    def _idle_heartbeat(self) -> None:
        with self._cond:
            training = self._active is not None
        if not training:  # a run's step messages are its heartbeat
            self.bus.send({"command": "heartbeat", "time": time.time()})

    def _on_lost(self, reason: str) -> None:
        with self._cond:
            active = self._active
        if active is not None:
            multihost.mark_interrupted(active.run, reason, force=True)

    def estimate_json(self, cfg: Any) -> dict[str, Any]:
        """The estimate, plus the hosts: per-host devices and bytes, multi-host mesh problems."""
        out = super().estimate_json(cfg)
        n, hosts = len(self._devices), multihost.process_count()
        problems = [p.to_dict() for p in multihost.validate_hosts(cfg.mesh, global_devices=n,
                                                                 processes=hosts)]
        out["mesh_problems"] = out["mesh_problems"] + problems
        out["ok"] = out["ok"] and not any(p["level"] == "error" for p in problems)
        if out.get("estimate"):
            from adapters_lib import memory

            est = memory.MemoryEstimate(**{k: v for k, v in out["estimate"].items()
                                           if k not in ("total", "fraction", "verdict")})
            out["hosts"] = multihost.per_host_summary(est, global_devices=n, processes=hosts)
            out["summary"] = f"{out['summary']}; {out['hosts']['line']}"
        return out

    def cmd_export(self, cmd: Any) -> Any:
        self.find_run(cmd.run_id)  # a missing run is still a 404
        self._refuse_restore("export")

    @staticmethod
    def _refuse_restore(what: str) -> NoReturn:
        """Export restores through paths (merged weights, orbax catalog loaders) that end in a
        barrier over every process of the job while the others wait on the ``Bus``: it would
        hang the engine. Refuse in words instead (HTTP 501)."""
        raise EngineError(
            f"{what} is not available on a multi-host engine: its checkpoint restore on "
            "process 0 alone would wait for the other processes forever",
            status=501, where="engine start --multihost",
            hint="use `gemma-workbench export ID` (it runs in a process of its own) where the run "
                 "directory is visible and devices are free, or a single-host engine")

    def _run_training(self, item: QueuedRun) -> None:
        """The run broadcast to every process, then trained on all of them: every process
        leaves the loop at the same step; a lost peer means ``interrupted``.

        The ``train`` message goes out here (inside ``Engine._train``, after its own checks)
        and its ``stop`` is the decision process 0 acts on, so process 0 and the others
        always agree on whether the run starts.
        """
        from adapters_lib.train.loop import run_training

        run = item.run
        stop = item.stop.is_set()
        self.bus.send({"command": "train", "run_dir": str(run.path.resolve()),
                       "resume": item.resume, "stop": stop})
        if stop:  # the others skip it too
            run.set_state("stopped", "stopped before it started")
            return
        log.info("run %s on %d processes", run.run_id, multihost.process_count())
        run.write_status("running", pid=os.getpid(), processes=multihost.process_count())
        control = multihost.SyncedControl(self.bus, RunControl(self, item))
        try:
            run_training(run.config(), run.path, control=control, resume=item.resume)
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
            self.bus.send({"command": "shutdown"})  # the device thread has ended: no race
        except Exception:  # noqa: BLE001 - the followers may be gone already
            log.warning("multi-host: could not tell the other processes to stop", exc_info=True)


def run_follower(bus: multihost.Bus | None = None) -> int:
    """A process ≠ 0: execute process 0's messages until ``shutdown``."""
    bus = bus or multihost.Bus()
    watchdog = multihost.Watchdog().start()
    try:
        while True:
            msg = bus.receive()
            kind = msg.get("command")
            if kind == "heartbeat":
                continue
            if kind == "shutdown":
                log.info("multi-host: process 0 asked to stop")
                return 0
            if kind == "train":
                if msg.get("stop"):
                    continue  # process 0 does not start it either
                try:
                    multihost.train_one(Path(msg["run_dir"]), resume=bool(msg["resume"]), bus=bus)
                except Exception:  # noqa: BLE001 - process 0 reports it; stay in step
                    log.exception("multi-host: run %s failed here", msg["run_dir"])
                continue
            log.error("multi-host: unexpected message %r", kind)
    finally:
        watchdog.stop()


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
    args = parser.parse_args(argv)
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
    paths.ensure_private_dir(f["socket"].parent)
    lock = daemon._lock(f["lock"])
    if lock is None:
        raise WorkbenchError("an engine is already running on this host",
                             hint="stop it (`gemma-workbench engine stop`) first")
    daemon._setup_logging(f["log"], args.foreground)
    daemon.write_private(f["pid"], f"{os.getpid()}\n")
    factory = functools.partial(LeaderEngine, bus=multihost.Bus())
    try:
        return asyncio.run(daemon.serve(foreground=args.foreground, tcp=args.tcp, warm=True,
                                        engine_factory=factory))
    except Exception:
        log.exception("engine crashed")
        return 1
    finally:
        os.close(lock)


if __name__ == "__main__":
    import sys

    sys.exit(main())
