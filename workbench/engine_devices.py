"""Why a mesh does not fit the running engine's devices, in words a user can act on.

An engine's devices are fixed when it starts (JAX reads ``XLA_FLAGS``, ``CUDA_VISIBLE_DEVICES``
… once); a shell that later asks for another count reaches the same engine. So a mesh that
fits this shell but not the engine is refused with the engine named (pid, since when, its
devices), what this shell asks for, and the command that restarts it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from adapters_lib.engine import api
from adapters_lib.errors import WorkbenchError

DEVICE_FLAG = "--xla_force_host_platform_device_count"
VISIBLE = ("CUDA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS")


def shell_request(environ: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """(the device count this shell asks for, or None; the words saying where it asks)."""
    env = os.environ if environ is None else environ
    flags = env.get("XLA_FLAGS", "")
    m = re.search(rf"{DEVICE_FLAG}=(\d+)", flags)
    if m:
        return int(m.group(1)), f"this shell asks for {m.group(1)} (XLA_FLAGS={m.group(0)})"
    for name in VISIBLE:
        if env.get(name):
            count = len([p for p in env[name].split(",") if p.strip()])
            return count, f"this shell asks for {count} ({name}={env[name]})"
    return None, "this shell sets no device count (XLA_FLAGS has no device_count)"


def since_text(started: float, now: float | None = None) -> str:
    """``since 01:02:03`` today, ``since Dec 01 23:59`` before."""
    now = time.time() if now is None else now
    when = time.localtime(started)
    if time.strftime("%Y%m%d", when) == time.strftime("%Y%m%d", time.localtime(now)):
        return "since " + time.strftime("%H:%M:%S", when)
    return "since " + time.strftime("%b %d %H:%M", when)


def engine_text(status: api.EngineStatus) -> str:
    """``pid 4242, since 01:02:03, 1 cpu device`` from an engine status reply."""
    devices = status.devices
    kind = (devices[0].kind or devices[0].platform) if devices else ""
    count = f"{len(devices)} {kind} device{'s' if len(devices) != 1 else ''}".replace("  ", " ")
    since = f", {since_text(status.started)}" if status.started else ""
    return f"pid {status.pid}{since}, {count}"


def device_mismatch(err: WorkbenchError, status: api.EngineStatus, *, remote: str | None = None,
                    environ: Mapping[str, str] | None = None) -> WorkbenchError:
    """``err`` (a mesh that does not fit the engine's devices) with the engine, this shell's
    request and the restart command."""
    asked, asks = shell_request(environ)
    devices = len(status.devices)
    message = (f"{err.message} — the running engine ({engine_text(status)}) fixed its devices "
               "when it started")
    if remote:
        hint = (f"restart the engine on {remote}: `gemma-workbench --remote {remote} engine "
                "stop`, then start it there with the device count you want")
    else:
        message += f"; {asks}"
        restart = "restart the engine: `gemma-workbench engine stop`, "
        if asked is not None and asked != devices:  # this shell sees other devices: restart
            hint = restart + "then run this command again (it starts an engine with this shell's devices)"
            hint += f"; or {err.hint}" if err.hint else ""
        else:  # the config asks for devices no one offers: fix the mesh, or start wider
            hint = (f"{err.hint}; or " if err.hint else "") + restart + (
                f"then start one with the devices you want (`XLA_FLAGS={DEVICE_FLAG}=N "
                "gemma-workbench engine start` on a CPU)")
    return WorkbenchError(message, where=err.where, hint=hint)


def fits(mesh: Any, device_count: int) -> bool:
    """Whether a ``MeshSpec`` can be laid on ``device_count`` devices."""
    from adapters_lib import mesh as mesh_lib

    try:
        mesh_lib.resolve(mesh, device_count)
    except WorkbenchError:
        return False
    return True
