"""What is installed, what hardware is there (``adapters_lib.memory.hardware``), and whether the two
agree.

Probes are plain functions whose inputs can be given (a fake ``/dev``, ``/proc``, an env
mapping, a command runner), so tests feed them fake hardware instead of patching internals.
``diagnose(hardware, jax_probe, ...)`` is pure: it turns probe results into problems, each
with the one command that fixes it. ``collect()`` runs everything for ``gemma-workbench doctor``.

Order matters on a TPU VM: the libtpu lock is probed *before* JAX is imported, since
initialising JAX on the TPU takes that lock itself.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from adapters_lib import paths
from adapters_lib.memory.hardware import (
    LIBTPU_LOCKFILE,
    TPU_PRESENCE_VARS,
    Hardware,
    probe_hardware,
)

DISTRIBUTIONS = {
    "jax": "jax", "jaxlib": "jaxlib", "gemma": "gemma", "textual": "textual", "keras": "keras",
    "keras_hub": "keras-hub", "orbax": "orbax-checkpoint", "flax": "flax", "optax": "optax",
    "kagglehub": "kagglehub", "huggingface_hub": "huggingface-hub", "libtpu": "libtpu",
    "jax_cuda12_plugin": "jax-cuda12-plugin", "jax_cuda13_plugin": "jax-cuda13-plugin",
}
MIN_CUDA12_DRIVER = 525  # jax[cuda12] wheels need an NVIDIA driver >= 525.60


# --------------------------------------------------------------------------- versions


def versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in DISTRIBUTIONS.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    return out


# --------------------------------------------------------------------------- paths and caches


def kagglehub_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where ``kagglehub.model_download`` puts weights (``$KAGGLEHUB_CACHE`` or ~/.cache/kagglehub)."""
    return Path(env.get("KAGGLEHUB_CACHE") or Path.home() / ".cache" / "kagglehub").expanduser()


def hf_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ~/.cache/huggingface/hub)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def path_report(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    return {
        "data": str(paths.data_dir()), "runs": str(paths.runs_dir()),
        "state": str(paths.state_dir()), "config": str(paths.config_dir()),
        "runtime": str(paths.runtime_dir()),
        "kagglehub_cache": str(kagglehub_cache_dir(env)), "hf_cache": str(hf_cache_dir(env)),
    }


def cache_report(env: Mapping[str, str] = os.environ) -> dict[str, dict[str, Any]]:
    """Which weight caches exist and the models in them (names only, no weights read)."""
    kaggle = kagglehub_cache_dir(env)
    kaggle_models = sorted(
        "/".join(p.relative_to(kaggle / "models").parts)
        for p in kaggle.glob("models/*/*/*/*/*") if p.is_dir() and p.name.isdigit()
    ) if kaggle.is_dir() else []
    hf = hf_cache_dir(env)
    hf_models = sorted(
        p.name.removeprefix("models--").replace("--", "/") for p in hf.glob("models--*") if p.is_dir()
    ) if hf.is_dir() else []
    return {
        "kagglehub": {"path": str(kaggle), "exists": kaggle.is_dir(), "models": kaggle_models},
        "huggingface": {"path": str(hf), "exists": hf.is_dir(), "models": hf_models},
    }


def converted_weights_report() -> dict[str, Any]:
    """The converted-weights cache (``models.converted_cache``): folder, cap, entries."""
    from adapters_lib.models import converted_cache

    try:
        return converted_cache.report()
    except OSError as e:
        return {"path": "", "enabled": False, "cap_bytes": 0, "bytes": 0, "entries": [], "error": str(e)}


# --------------------------------------------------------------------------- JAX


@dataclass
class JaxProbe:
    backend: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    process_count: int = 1
    error: str | None = None
    """The exception text when JAX could not start at all."""
    messages: list[str] = field(default_factory=list)
    """Warnings JAX logged while choosing a backend (e.g. why it fell back to CPU)."""


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def probe_jax() -> JaxProbe:
    """Start JAX in this process and list its devices (honours XLA_FLAGS / JAX_PLATFORMS)."""
    capture = _Capture()
    logger = logging.getLogger("jax._src.xla_bridge")
    logger.addHandler(capture)
    probe = JaxProbe()
    try:
        import jax

        devices = jax.devices()
        probe.backend = jax.default_backend()
        probe.process_count = jax.process_count()
        for d in devices:
            try:
                stats = d.memory_stats() or {}
            except Exception:  # noqa: BLE001 - CPU devices may not implement it
                stats = {}
            probe.devices.append({
                "id": d.id, "platform": d.platform, "kind": d.device_kind,
                "memory_bytes": stats.get("bytes_limit"), "process_index": d.process_index,
            })
    except Exception as e:  # noqa: BLE001 - any init failure is a finding, not a crash
        probe.error = f"{type(e).__name__}: {e}".strip()
    finally:
        logger.removeHandler(capture)
    probe.messages = capture.lines
    return probe


# --------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class Problem:
    message: str
    fix: str
    severity: str = "error"  # "error" | "warning"


def setup_script(repo: Path | None) -> Path | None:
    script = repo / "scripts" / "setup.sh" if repo else None
    return script if script and script.is_file() else None


def fix_command(accel: str, repo: Path | None, python: str = sys.executable) -> str:
    """The one command that installs the JAX build for ``accel`` (matches scripts/setup.sh)."""
    if setup_script(repo):
        return f"cd {repo} && ACCEL={accel} make setup"
    extra = {"tpu": "jax[tpu]", "cuda": "jax[cuda12]", "cpu": "jax"}[accel]
    return f'{python} -m pip install -U "{extra}"'


_IN_USE = re.compile(r"(already in use|in use by process|resource busy|libtpu_lockfile)", re.I)
_PID = re.compile(r"pid (\d+)")


def diagnose(hw: Hardware, jx: JaxProbe, vers: Mapping[str, str | None], *,
             env: Mapping[str, str] = os.environ, repo: Path | None = None,
             python: str = sys.executable) -> list[Problem]:
    """Compare the hardware with the JAX that runs; each problem names its fix. Pure."""
    problems: list[Problem] = []
    text = "\n".join([jx.error or "", *jx.messages])
    forced = env.get("JAX_PLATFORMS", "")
    on_cpu = jx.backend in (None, "cpu")
    if hw.has_tpu and on_cpu:
        where = ", ".join(hw.tpu_device_files[:2] or [f"{k}={v}" for k, v in hw.tpu_env.items()
                                                      if k in TPU_PRESENCE_VARS][:2])
        holder = hw.tpu_holders[0] if hw.tpu_holders else None
        if holder or _IN_USE.search(text):
            pid = holder["pid"] if holder else (int(m.group(1)) if (m := _PID.search(text)) else None)
            who = f"process {pid}" + (f" ({holder['command'][:60]})" if holder and holder["command"] else "")
            if pid is not None:
                problems.append(Problem(
                    f"the TPU is in use by {who}; JAX here fell back to CPU",
                    f"kill {pid}   (or stop it: gemma-workbench engine stop, if it is the engine)"))
            elif hw.libtpu_lockfile:
                problems.append(Problem(
                    f"libtpu reports the TPU in use, but no process holds it: {LIBTPU_LOCKFILE} is stale",
                    f"rm {LIBTPU_LOCKFILE}"))
            else:
                problems.append(Problem(
                    "the TPU is in use by another process (libtpu lock); JAX here fell back to CPU",
                    "sudo lsof -w /dev/accel* /dev/vfio/*   (then kill that process)"))
        elif forced and "tpu" not in forced:
            problems.append(Problem(f"a TPU is present ({where}) but JAX_PLATFORMS={forced} keeps JAX on CPU",
                                    "unset JAX_PLATFORMS", "warning"))
        elif not vers.get("libtpu"):
            problems.append(Problem(
                f"a TPU is present ({where}) but the installed JAX has no TPU support (libtpu missing); JAX runs on CPU",
                fix_command("tpu", repo, python)))
        else:
            first = (jx.error or next((m for m in jx.messages if "tpu" in m.lower()), "")).splitlines()
            cause = f": {first[0][:160]}" if first else ""
            problems.append(Problem(
                f"a TPU is present ({where}) and libtpu {vers.get('libtpu')} is installed, but JAX runs on CPU{cause}",
                fix_command("tpu", repo, python)))
    if hw.has_nvidia and on_cpu and not hw.has_tpu:
        gpus = f"{len(hw.nvidia_gpus)}× {hw.nvidia_gpus[0]}"
        plugin = vers.get("jax_cuda12_plugin") or vers.get("jax_cuda13_plugin")
        major = int(hw.nvidia_driver.split(".")[0]) if hw.nvidia_driver and hw.nvidia_driver[0].isdigit() else None
        if forced and "cuda" not in forced and "gpu" not in forced:
            problems.append(Problem(f"an NVIDIA GPU is present ({gpus}) but JAX_PLATFORMS={forced} keeps JAX on CPU",
                                    "unset JAX_PLATFORMS", "warning"))
        elif not plugin:
            problems.append(Problem(
                f"an NVIDIA GPU is present ({gpus}) but the installed JAX is the CPU build",
                fix_command("cuda", repo, python)))
        elif major is not None and major < MIN_CUDA12_DRIVER:
            problems.append(Problem(
                f"NVIDIA driver {hw.nvidia_driver} is older than the {MIN_CUDA12_DRIVER} that jax[cuda12] needs; JAX runs on CPU",
                "upgrade the NVIDIA driver (e.g. sudo apt-get install nvidia-driver-550), then reboot"))
        else:
            first = (jx.error or next((m for m in jx.messages if "cuda" in m.lower() or "gpu" in m.lower()), "")).splitlines()
            cause = f": {first[0][:160]}" if first else ""
            problems.append(Problem(
                f"an NVIDIA GPU is present ({gpus}) and the CUDA plugin is installed, but JAX runs on CPU{cause}",
                fix_command("cuda", repo, python)))
    if jx.error and not problems:
        problems.append(Problem(f"JAX could not start: {jx.error.splitlines()[0][:200]}",
                                fix_command("cpu", repo, python)))
    if vers.get("jax") and vers.get("jaxlib") and vers["jax"].split(".")[:2] != vers["jaxlib"].split(".")[:2]:
        problems.append(Problem(f"jax {vers['jax']} and jaxlib {vers['jaxlib']} differ",
                                fix_command("cpu", repo, python) if on_cpu else fix_command(
                                    "tpu" if jx.backend == "tpu" else "cuda", repo, python)))
    return problems


# --------------------------------------------------------------------------- all together


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "scripts" / "setup.sh").is_file() else None


def collect(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Everything ``gemma-workbench doctor --json`` prints (contract keys first)."""
    hw = probe_hardware(env=env)  # before JAX: starting JAX on a TPU takes the libtpu lock
    vers = versions()
    jx = probe_jax()
    problems = diagnose(hw, jx, vers, env=env, repo=repo_root())
    return {
        "versions": vers,
        "backend": jx.backend,
        "devices": jx.devices,
        "device_count": len(jx.devices),
        "process_count": jx.process_count,
        "paths": path_report(env),
        "caches": cache_report(env),
        "converted_weights": converted_weights_report(),
        "hardware": asdict(hw),
        "env": {k: env[k] for k in ("JAX_PLATFORMS", "XLA_FLAGS", "KERAS_BACKEND") if env.get(k)},
        "jax_error": jx.error,
        "jax_messages": jx.messages,
        "problems": [asdict(p) for p in problems],
    }
