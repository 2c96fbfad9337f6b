"""Multi-host (multi-controller) JAX: one process per host, all running the same program.

- ``initialize(coordinator=, num_processes=, process_id=)``: ``jax.distributed.initialize``
  (no arguments on a TPU VM slice: JAX finds the coordinator itself); on CPU it selects gloo
  collectives first. Call it before anything touches a JAX backend.
- ``is_primary()``, ``process_index()``, ``process_count()``, ``local_device_count()``.
- ``run_dir_for(path)``: the run directory this process writes through: the plain
  ``RunDir`` on process 0; a ``FollowerRunDir`` elsewhere, which writes no metrics, events
  or status (it keeps its own status in memory) but shares ``checkpoints/`` — orbax's
  multi-host save/restore needs every process to call it on the same directory.
- ``Bus``: messages from process 0 to every process, through JAX's own collectives
  (``multihost_utils.broadcast_one_to_all`` of a length-prefixed UTF-8 JSON message as a
  uint8 array). Every process calls ``exchange`` at the same point of the program: process 0
  with the message, the others with ``None``; all get process 0's message. A follower
  waiting on a dead leader fails in the collective (gloo: connection closed; TPU: the
  coordination service's heartbeat) instead of waiting forever; idle leaders send a
  heartbeat message every few seconds so that this happens while nothing runs too.
- ``per_host_summary(...)``: global and per-host device counts and memory for the estimate.

``python -m adapters_lib.multihost train RUN_DIR --coordinator HOST:PORT --num-processes N
--process-id I [--resume]`` trains one run directory as one process of N (tests and
scripts; the engine uses ``adapters_lib.engine.multihost``).
``python -m adapters_lib.multihost plan`` prints the memory-plan table of docs/multihost.md.

Nothing here imports jax at module level.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError
from adapters_lib.runs import RunDir

log = logging.getLogger(__name__)

_initialized = False


# --------------------------------------------------------------------------- start-up


def parse_coordinator(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise WorkbenchError(f"--coordinator {text!r} is not HOST:PORT", where="--coordinator",
                             hint="e.g. --coordinator 10.0.0.2:8476 (process 0's address)")
    return text


def on_tpu_vm() -> bool:
    """A Cloud TPU VM (JAX can find the slice's coordinator itself)."""
    return bool(os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("TPU_NAME")
                or Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists())


def initialize(*, coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, timeout_s: int = 300,
               heartbeat_timeout_s: int = 100) -> dict[str, Any]:
    """Start ``jax.distributed`` (once). Without arguments JAX detects the cluster (TPU VMs).

    Returns ``describe()``. Raises ``WorkbenchError`` for an incomplete set of arguments.
    """
    global _initialized
    given = [coordinator is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise WorkbenchError("--coordinator, --num-processes and --process-id go together",
                             where="engine start --multihost",
                             hint="give all three, or none on a TPU VM (detected automatically)")
    if num_processes is not None and not 0 <= int(process_id) < int(num_processes):
        raise WorkbenchError(f"--process-id {process_id} is not in 0..{int(num_processes) - 1}",
                             where="--process-id")
    if coordinator is None and not on_tpu_vm():
        raise WorkbenchError("not a TPU VM: cannot find the coordinator by itself",
                             where="engine start --multihost",
                             hint="pass --coordinator HOST:PORT --num-processes N --process-id I")
    import jax

    if _initialized:
        return describe()
    if coordinator is not None:
        parse_coordinator(coordinator)
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms == "cpu" or (coordinator is not None and not on_tpu_vm() and "tpu" not in platforms):
        # CPU processes need a collectives backend across processes (no-op for GPU/TPU arrays).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs: dict[str, Any] = {"initialization_timeout": timeout_s,
                              "heartbeat_timeout_seconds": heartbeat_timeout_s}
    if coordinator is not None:
        kwargs.update(coordinator_address=coordinator, num_processes=int(num_processes),
                      process_id=int(process_id))
    jax.distributed.initialize(**kwargs)
    _initialized = True
    info = describe()
    log.info("jax.distributed: process %d of %d, %d local / %d global devices",
             info["process_index"], info["process_count"], info["local_devices"],
             info["global_devices"])
    return info


def describe() -> dict[str, Any]:
    import jax

    return {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "local_devices": jax.local_device_count(), "global_devices": jax.device_count()}


def process_index() -> int:
    import jax

    return jax.process_index()


def process_count() -> int:
    import jax

    return jax.process_count()


def local_device_count() -> int:
    import jax

    return jax.local_device_count()


def is_primary() -> bool:
    """Process 0 (or a single-process run): the one that writes the run's files and serves."""
    if "jax" not in sys.modules:
        return True
    return process_index() == 0


# --------------------------------------------------------------------------- liveness


def _client() -> Any:
    from jax._src import distributed

    return distributed.global_state.client


def _try_get(client: Any, key: str) -> str | None:
    try:
        return client.key_value_try_get(key)
    except Exception:  # noqa: BLE001 - not written yet
        return None


class Watchdog:
    """Notices a lost process of the job (the collectives would wait on it for ever).

    Each process writes a heartbeat counter to the coordination service's key-value store
    every ``interval`` seconds and reads the others'. A counter that has not moved for
    ``timeout`` seconds (by this process's own clock, so host clocks need not agree), or a
    coordination service that stops answering (process 0 died), is a lost process: the
    watchdog calls ``on_lost(reason)`` (process 0 marks its active run ``interrupted``),
    then ends this process with ``exit_code``. A JAX job cannot go on without one of its
    processes: restart every process, then resume. (``get_live_nodes`` of the coordination
    client did not notice a killed process within 25 s in jax 0.12, hence the counters.)
    """

    PREFIX = "gemma_workbench/heartbeat/"

    def __init__(self, on_lost: Any = None, *, interval: float = 1.0, timeout: float | None = None,
                 exit_code: int = 75):
        import threading

        self.on_lost = on_lost
        self.interval = interval
        self.timeout = timeout if timeout is not None else float(
            os.environ.get("GEMMA_WORKBENCH_MULTIHOST_TIMEOUT", "30"))
        self.exit_code = exit_code
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="multihost-watchdog", daemon=True)

    def start(self) -> Watchdog:
        if _client() is not None and process_count() > 1:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        try:
            self._watch_loop()
        except Exception:  # noqa: BLE001 - never silently
            log.exception("multi-host watchdog failed")

    def _watch_loop(self) -> None:
        import time

        client = _client()
        me, want = process_index(), process_count()
        beat = 0
        seen: dict[int, tuple[str | None, float]] = {}
        failing_since: float | None = None
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            beat += 1
            try:
                client.key_value_set(f"{self.PREFIX}{me}", str(beat), allow_overwrite=True)
                failing_since = None
            except Exception as e:  # noqa: BLE001 - the coordination service is gone
                failing_since = failing_since or now
                if now - failing_since >= min(self.timeout, 5.0):
                    self._lost(f"lost the coordinator (process 0): {type(e).__name__}")
                    return
                continue
            values = {p: _try_get(client, f"{self.PREFIX}{p}") for p in range(want) if p != me}
            log.debug("multi-host heartbeat %d: %s", beat, values)
            for p, value in values.items():
                last_value, since = seen.get(p, (None, now))
                if value != last_value:
                    seen[p] = (value, now)
                elif now - since > self.timeout:
                    self._lost(f"process {p} of {want} sent no heartbeat for {now - since:.0f} s")
                    return

    def _lost(self, reason: str) -> None:
        if self._stop.is_set():
            return
        log.error("multi-host: %s; exiting (restart every process, then resume)", reason)
        try:
            if self.on_lost is not None:
                self.on_lost(reason)
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("multi-host: on_lost failed")
        finally:
            logging.shutdown()
            os._exit(self.exit_code)


# --------------------------------------------------------------------------- run dirs


@dataclass(frozen=True)
class FollowerRunDir(RunDir):
    """The run directory as seen by a process other than 0: reads work, writes are kept in
    memory (status) or dropped (metrics, events, the owner lease); ``checkpoints_dir`` is the
    shared one."""

    records = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_status", dict(RunDir.status(self)))

    def status(self) -> dict[str, Any]:
        return dict(self._status)  # type: ignore[attr-defined]

    def append_metrics(self, record: dict[str, Any]) -> None:
        pass

    def append_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        import time

        return {"time": round(time.time(), 3), "kind": kind, **fields}

    def append_metrics_many(self, records: Any) -> None:
        pass

    def sync_metrics(self) -> None:
        pass

    def write_status(self, state: str, *, expect: Any = None, **fields: Any) -> dict[str, Any] | None:
        status = self._status  # type: ignore[attr-defined]
        if expect is not None and status.get("state") not in tuple(expect):
            return None
        status.update(fields)
        status.update(state=state, run_id=self.run_id)
        return dict(status)

    def truncate_metrics_after(self, step: int) -> None:
        pass


def run_dir_for(path: str | Path) -> RunDir:
    """``RunDir`` on the primary process, ``FollowerRunDir`` on the others."""
    return RunDir(Path(path)) if is_primary() else FollowerRunDir(Path(path))


# --------------------------------------------------------------------------- messages


HEADER = 8  # bytes of the length prefix (uint64, little-endian)
MIN_BUCKET = 256


def _bucket(n: int) -> int:
    """Payload sizes are rounded up to powers of two: few distinct shapes, few compiles."""
    size = MIN_BUCKET
    while size < n:
        size *= 2
    return size


def encode(message: dict[str, Any], size: int | None = None):
    """A message as a uint8 array: 8-byte little-endian length, UTF-8 JSON, zero padding."""
    import numpy as np

    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    size = size or _bucket(HEADER + len(body))
    if HEADER + len(body) > size:
        raise ValueError(f"message of {len(body)} bytes does not fit in {size}")
    buf = np.zeros(size, np.uint8)
    buf[:HEADER] = np.frombuffer(len(body).to_bytes(HEADER, "little"), np.uint8)
    buf[HEADER:HEADER + len(body)] = np.frombuffer(body, np.uint8)
    return buf


def decode(buf: Any) -> dict[str, Any]:
    import numpy as np

    data = np.asarray(buf, np.uint8).tobytes()
    n = int.from_bytes(data[:HEADER], "little")
    return json.loads(data[HEADER:HEADER + n].decode("utf-8"))


class Bus:
    """Process 0 → every process, through ``broadcast_one_to_all`` (two collectives a message:
    the payload size, then the payload). Every process must call ``exchange`` in the same
    order; see the module docstring."""

    def __init__(self) -> None:
        self.sent = 0

    def exchange(self, message: dict[str, Any] | None) -> dict[str, Any]:
        import numpy as np
        from jax.experimental import multihost_utils

        primary = is_primary()
        if primary:
            if message is None:
                raise ValueError("process 0 must give the message")
            payload = encode(message)
            size = np.array([payload.size], np.int64)
        else:
            size = np.zeros(1, np.int64)
        size = int(np.asarray(multihost_utils.broadcast_one_to_all(size))[0])
        if not primary:
            payload = np.zeros(size, np.uint8)
        got = np.asarray(multihost_utils.broadcast_one_to_all(payload))
        self.sent += 1
        return decode(got)

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        """Process 0's side."""
        return self.exchange(message)

    def receive(self) -> dict[str, Any]:
        """A follower's side."""
        return self.exchange(None)


class SyncedControl:
    """A ``TrainControl`` whose stop decision is process 0's, on every process.

    Process 0 wraps its real control (``inner``); the others have ``inner=None``. Each call of
    ``should_stop`` is one ``Bus`` message, so every process leaves the loop at the same step.
    Metrics and events reach ``inner`` on process 0 only; ``between_steps`` runs only there
    (the engine serves sampling on process 0's own devices).
    """

    def __init__(self, bus: Bus, inner: Any = None):
        self.bus = bus
        self.inner = inner

    def should_stop(self) -> bool:
        if is_primary():
            local = bool(self.inner.should_stop()) if self.inner is not None else False
            return bool(self.bus.send({"command": "step", "stop": local})["stop"])
        msg = self.bus.receive()
        if msg.get("command") != "step":
            raise RuntimeError(f"multi-host: expected a step message, got {msg.get('command')!r}")
        return bool(msg["stop"])

    def on_metrics(self, record: dict[str, Any]) -> None:
        if self.inner is not None and is_primary():
            self.inner.on_metrics(record)

    def on_event(self, record: dict[str, Any]) -> None:
        if self.inner is not None and is_primary():
            self.inner.on_event(record)

    def between_steps(self) -> None:
        if self.inner is not None and is_primary():
            self.inner.between_steps()


class StallControl(SyncedControl):
    """For tests: this process hangs (as a wedged host would) before step ``at + 1``."""

    def __init__(self, bus: Bus, inner: Any = None, *, at: int):
        super().__init__(bus, inner)
        self.at = at
        self.steps = 0

    def between_steps(self) -> None:
        super().between_steps()
        self.steps += 1
        if self.steps == self.at:
            import time

            print(json.dumps({"stalled_at": self.at, "process": process_index()}), flush=True)
            while True:
                time.sleep(60)


# --------------------------------------------------------------------------- memory


def per_host_summary(estimate: Any, *, global_devices: int, processes: int,
                     host_bytes: int = 0) -> dict[str, Any]:
    """Global and per-host figures for a ``memory.MemoryEstimate`` (bytes per device).

    The mesh spans ``global_devices`` over ``processes`` hosts; per host that is
    ``global_devices // processes`` devices, and the same bytes per device.
    """
    from adapters_lib.memory import fmt_bytes

    per_host_devices = max(1, global_devices // max(processes, 1))
    per_host = estimate.total * per_host_devices
    out = {"processes": processes, "global_devices": global_devices,
           "devices_per_host": per_host_devices, "bytes_per_device": estimate.total,
           "bytes_per_host": per_host, "bytes_global": estimate.total * global_devices}
    line = (f"{processes} host(s) × {per_host_devices} device(s) = {global_devices} devices; "
            f"{fmt_bytes(estimate.total)} per device, {fmt_bytes(per_host)} per host")
    if host_bytes:
        line += f" (host RAM {fmt_bytes(host_bytes)})"
    out["line"] = line
    return out


def validate_hosts(mesh_spec: Any, *, global_devices: int, processes: int) -> list[Any]:
    """Problems specific to a multi-host mesh, in the words of ``mesh.validate``."""
    from adapters_lib import mesh as mesh_lib

    problems = []
    if processes > 1 and global_devices % processes:
        problems.append(mesh_lib.Problem(
            "error", f"{global_devices} devices do not split evenly over {processes} hosts"))
    if processes > 1 and mesh_spec.devices and mesh_spec.devices != global_devices:
        problems.append(mesh_lib.Problem(
            "error", f"mesh.devices = {mesh_spec.devices}, but a multi-host run spans all "
                     f"{global_devices} devices of its {processes} hosts",
            "set mesh.devices = 0 (all)"))
    return problems


# Accelerator targets of the memory plan: (name, hosts, chips per host, bytes per chip).
PLAN_TARGETS = (
    ("v5e-8", 1, 8, 16 * 2**30),
    ("v5e-16", 4, 4, 16 * 2**30),
    ("v5p-8", 1, 4, 95 * 2**30),
    ("1× H100", 1, 1, 80 * 2**30),
)
PLAN_MODELS = ("Gemma3_1B", "Gemma3_4B", "Gemma3_12B", "Gemma3_27B", "Gemma4_31B")


def plan_rows(*, rank: int = 16, seq_len: int = 2048, remat: bool = True) -> list[dict[str, Any]]:
    """The memory plan: each model × target with LoRA ``rank`` on every projection, bf16
    weights and compute, f32 adapters, one sequence of ``seq_len`` per chip, the weights on
    ``fsdp`` over every chip of the job (``memory.estimate``, the estimator the engine uses)."""
    from gemma import gm

    from adapters_lib import memory

    rows = []
    for name in PLAN_MODELS:
        model = getattr(gm.nn, name, None)
        if model is None:
            continue
        config = model.config
        for target, hosts, chips, hbm in PLAN_TARGETS:
            n = hosts * chips
            est = memory.estimate(config, batch_size=n, seq_len=seq_len, mesh_shape=(1, n, 1),
                                  lora_rank=rank, lora_dtype="float32", param_dtype="bfloat16",
                                  compute_dtype="bfloat16", remat=remat, device_bytes=hbm)
            rows.append({"model": name, "target": target, "hosts": hosts, "chips": n,
                         "mesh": f"fsdp={n}", "estimate": est,
                         "per_host": per_host_summary(est, global_devices=n, processes=hosts)})
    return rows


def plan_table(**kwargs: Any) -> str:
    """``plan_rows`` as a markdown table."""
    from adapters_lib.memory import fmt_bytes

    out = ["| model | target | hosts × chips | weights/chip | adapters+opt/chip | activations/chip "
           "| total/chip | of HBM | per host | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in plan_rows(**kwargs):
        e = r["estimate"]
        ph = r["per_host"]
        out.append(
            f"| {r['model'].replace('_', ' ')} | {r['target']} | {r['hosts']} × "
            f"{ph['devices_per_host']} | {fmt_bytes(e.weights + e.compute_copy)} | "
            f"{fmt_bytes(e.adapters + e.gradients + e.optimizer)} | "
            f"{fmt_bytes(e.activations + e.logits + e.batch)} | {fmt_bytes(e.total)} | "
            f"{e.fraction:.0%} | {fmt_bytes(ph['bytes_per_host'])} | {e.verdict} |")
    return "\n".join(out)


# --------------------------------------------------------------------------- entry point


def train_one(run_path: Path, *, resume: bool, bus: Bus | None = None, inner: Any = None,
              stall_at: int = 0, watchdog_s: float | None = None):
    """Train ``run_path`` as this process of the job (the same call on every process).

    When the job loses a process mid-run (the collectives fail), process 0 marks the run
    ``interrupted`` (not ``failed``): it resumes from its last checkpoint. A process killed
    outright leaves the run ``running`` with a dead pid; the next engine start marks it.
    """
    from adapters_lib.train.loop import run_training

    run = run_dir_for(run_path)
    cfg = run.config()
    bus = bus or Bus()
    control = (StallControl(bus, inner, at=stall_at) if stall_at
               else SyncedControl(bus, inner))
    if is_primary():
        run.write_status(run.state, pid=os.getpid(), processes=process_count())
    watchdog = Watchdog(lambda reason: mark_interrupted(run, reason), timeout=watchdog_s).start()
    try:
        return run_training(cfg, run, control=control, resume=resume)
    except WorkbenchError:
        raise
    except Exception as err:
        if process_count() > 1 and lost_peer(err):
            first = str(err).splitlines()[0][:200] if str(err) else ""
            mark_interrupted(run, f"{type(err).__name__}: {first}", force=True)
        raise
    finally:
        watchdog.stop()


def lost_peer(err: BaseException) -> bool:
    """An error from the runtime's collectives or coordination (a process of the job died),
    as opposed to a mistake or a bug in this process."""
    text = f"{type(err).__name__}: {err}".lower()
    return type(err).__name__ in ("XlaRuntimeError", "JaxRuntimeError") or any(
        w in text for w in ("gloo", "connection", "peer", "heartbeat", "coordination",
                            "barrier", "deadline", "unavailable", "socket"))


def mark_interrupted(run: RunDir, reason: str = "", *, force: bool = False) -> None:
    """Process 0: the run stopped because a process of the job is gone (resumable).

    ``force``: also over the ``failed`` that ``run_training`` wrote for the runtime error.
    """
    from adapters_lib.runs import lifecycle

    allowed = ("running", "stopping", "queued") + (("failed",) if force else ())
    if not is_primary():
        return
    message = "a process of the multi-host job stopped; resume from the last checkpoint"
    lifecycle.mark_interrupted(run, message + (f" ({reason})" if reason else ""), expect=allowed)


def _cmd_train(args: argparse.Namespace) -> int:
    initialize(coordinator=args.coordinator, num_processes=args.num_processes,
               process_id=args.process_id, timeout_s=args.timeout, heartbeat_timeout_s=args.heartbeat)
    result = train_one(Path(args.run_dir), resume=args.resume, stall_at=args.stall_at_step,
                       watchdog_s=args.watchdog)
    out = {"process": process_index(), "state": result.state, "step": result.step,
           "losses": {str(k): v for k, v in sorted(result.losses.items())}}
    print(json.dumps(out), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters_lib.multihost")
    sub = parser.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a run directory as one process of a multi-host job")
    t.add_argument("run_dir")
    t.add_argument("--coordinator")
    t.add_argument("--num-processes", type=int)
    t.add_argument("--process-id", type=int)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--timeout", type=int, default=300, help="seconds to wait for all processes")
    t.add_argument("--heartbeat", type=int, default=100,
                   help="seconds without a heartbeat before a process is taken as dead")
    t.add_argument("--watchdog", type=float, default=None, metavar="SECONDS",
                   help="a process silent this long is lost (default 30, or "
                        "GEMMA_WORKBENCH_MULTIHOST_TIMEOUT)")
    t.add_argument("--stall-at-step", type=int, default=0, metavar="K",
                   help="(tests) hang this process after step K, as a wedged host would")
    t.set_defaults(fn=_cmd_train)
    p = sub.add_parser("plan", help="print the memory-plan table (markdown)")
    p.set_defaults(fn=lambda a: _cmd_plan())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.fn(args)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _cmd_plan() -> int:
    print(plan_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
