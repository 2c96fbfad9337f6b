"""``jax.distributed`` start-up and the process's place in the job (no jax at import).

``initialize(coordinator=, num_processes=, process_id=)`` starts ``jax.distributed`` once (no
arguments on a TPU VM slice: JAX finds the coordinator itself); on CPU it selects gloo
collectives first. Call it before anything touches a JAX backend.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from adapters_lib.errors import WorkbenchError

log = logging.getLogger("adapters_lib.multihost")

_initialized = False


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
