"""What the estimate says of a multi-host mesh: per-host figures and host-level problems."""

from __future__ import annotations

from typing import Any


def per_host_summary(estimate: Any, *, global_devices: int, processes: int,
                     host_bytes: int = 0) -> dict[str, Any]:
    """Global and per-host figures for a ``memory.MemoryEstimate`` (bytes per device).

    The mesh spans ``global_devices`` over ``processes`` hosts; per host that is
    ``global_devices // processes`` devices, and the same bytes per device.
    """
    from adapters_lib.memory.estimate import fmt_bytes

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
