"""What hardware this machine has, independent of what JAX sees: TPU device files and who
holds them (the libtpu lock), NVIDIA GPUs and their driver, the TPU environment.

Probes are plain functions whose inputs can be given (a fake ``/dev``, ``/proc``, an env
mapping, a command runner), so tests feed them fake hardware instead of patching internals.
``doctor`` turns what they find into problems; on a TPU VM they run before JAX is imported
(initialising JAX on the TPU takes the libtpu lock itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIBTPU_LOCKFILE = Path("/tmp/libtpu_lockfile")
TPU_ENV_VARS = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
                "TPU_SKIP_MDS_QUERY", "CLOUD_TPU_TASK_ID")
TPU_PRESENCE_VARS = ("TPU_NAME", "TPU_ACCELERATOR_TYPE")
"""Only these mean "this is a TPU machine" (as in scripts/setup.sh): libraries set the others
(TensorFlow sets TPU_SKIP_MDS_QUERY on import, for one)."""

@dataclass
class Hardware:
    """What the machine has, independent of what JAX sees."""

    tpu_device_files: list[str] = field(default_factory=list)
    tpu_env: dict[str, str] = field(default_factory=dict)
    nvidia_gpus: list[str] = field(default_factory=list)
    nvidia_driver: str | None = None
    libtpu_lockfile: bool = False
    tpu_holders: list[dict[str, Any]] = field(default_factory=list)
    """Processes other than this one holding the libtpu lock or a TPU device: {pid, command}."""

    @property
    def has_tpu(self) -> bool:
        return bool(self.tpu_device_files or any(k in self.tpu_env for k in TPU_PRESENCE_VARS))

    @property
    def has_nvidia(self) -> bool:
        return bool(self.nvidia_gpus)


Runner = Callable[[list[str]], str | None]


def run_command(argv: list[str]) -> str | None:
    """Run a probe command; its stdout, or None if it is missing or fails (5 s at most)."""
    if not shutil.which(argv[0]):
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def probe_tpu_files(dev: Path = Path("/dev")) -> list[str]:
    found = sorted(str(p) for p in dev.glob("accel*"))
    vfio = dev / "vfio"
    if vfio.is_dir():
        found += sorted(str(p) for p in vfio.iterdir() if p.name.isdigit())
    return found


def probe_nvidia(run: Runner = run_command, proc: Path = Path("/proc")) -> tuple[list[str], str | None]:
    """GPU names and driver version, from ``nvidia-smi`` or else ``/proc/driver/nvidia``."""
    gpus: list[str] = []
    driver: str | None = None
    listing = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if listing:
        for line in listing.strip().splitlines():
            name, _, ver = line.partition(",")
            gpus.append(name.strip())
            driver = ver.strip() or driver
    else:
        nv = proc / "driver" / "nvidia"
        for info in sorted((nv / "gpus").glob("*/information")):
            m = re.search(r"^Model:\s*(.+)$", info.read_text(errors="replace"), re.M)
            gpus.append(m.group(1).strip() if m else info.parent.name)
        version = nv / "version"
        if version.is_file():
            m = re.search(r"Kernel Module\s+([\d.]+)", version.read_text(errors="replace"))
            driver = m.group(1) if m else None
    return gpus, driver


def probe_tpu_holders(files: list[str], lockfile: Path = LIBTPU_LOCKFILE, proc: Path = Path("/proc"),
                      self_pid: int | None = None) -> list[dict[str, Any]]:
    """Other processes that hold the libtpu lock (``/proc/locks``) or have a TPU device open."""
    me = os.getpid() if self_pid is None else self_pid
    pids: set[int] = set()
    if lockfile.exists():
        try:
            st = lockfile.stat()
            inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
            for line in (proc / "locks").read_text().splitlines():
                parts = line.split()
                if len(parts) > 5 and parts[5] == inode and parts[4].isdigit():
                    pids.add(int(parts[4]))
        except OSError:
            pass
    targets = set(files) | {str(lockfile)}
    for fd_dir in proc.glob("[0-9]*/fd"):
        try:
            links = {os.readlink(fd) for fd in fd_dir.iterdir()}
        except OSError:
            continue  # other users' processes, or gone
        if links & targets:
            pids.add(int(fd_dir.parent.name))
    holders = []
    for pid in sorted(pids - {me}):
        try:
            cmd = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            cmd = ""
        holders.append({"pid": pid, "command": cmd})
    return holders


def probe_hardware(*, dev: Path = Path("/dev"), proc: Path = Path("/proc"),
                   env: Mapping[str, str] = os.environ, run: Runner = run_command,
                   lockfile: Path = LIBTPU_LOCKFILE) -> Hardware:
    files = probe_tpu_files(dev)
    gpus, driver = probe_nvidia(run, proc)
    return Hardware(
        tpu_device_files=files,
        tpu_env={k: env[k] for k in TPU_ENV_VARS if env.get(k)},
        nvidia_gpus=gpus, nvidia_driver=driver,
        libtpu_lockfile=lockfile.exists(),
        tpu_holders=probe_tpu_holders(files, lockfile, proc) if files or lockfile.exists() else [],
    )
