"""doctor: the JSON contract under simulated devices, and the hardware/JAX mismatch messages
(fed fake probe results: a fake /dev, /proc and nvidia-smi, never patched internals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters_lib import doctor
from adapters_lib.doctor import JaxProbe
from adapters_lib.memory import Hardware, hardware

REPO = Path(__file__).resolve().parent.parent
CPU_VERSIONS = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "libtpu": None, "jax_cuda12_plugin": None}


def _cli(*args: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    script = Path(sys.executable).parent / "gemma-workbench"  # the console script, as users run it
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "workbench"]
    return subprocess.run([*argv, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_doctor_json_has_contract_keys_and_lists_eight_simulated_devices():
    out = _cli("doctor", "--json", env_extra={
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in ("versions", "backend", "devices", "paths", "caches", "problems"):
        assert key in report
    for key in ("python", "jax", "jaxlib", "gemma", "textual", "keras", "keras_hub", "orbax", "flax", "optax"):
        assert key in report["versions"]
    assert report["versions"]["jax"]
    assert report["backend"] == "cpu"
    assert len(report["devices"]) == 8
    assert sorted(d["id"] for d in report["devices"]) == list(range(8))
    assert set(report["devices"][0]) >= {"id", "platform", "kind", "memory_bytes"}
    assert report["paths"]["data"].startswith(os.environ["GEMMA_WORKBENCH_HOME"])
    assert set(report["paths"]) >= {"data", "runs", "state", "config", "runtime", "kagglehub_cache", "hf_cache"}
    assert report["problems"] == []


def test_doctor_text_report_follows_the_device_count_flag():
    out = _cli("doctor", env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=3",
                                    "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr
    assert "devices: 3" in out.stdout
    assert "no problems found" in out.stdout


# --------------------------------------------------------------------------- probes on fake trees


def test_hardware_probe_reads_tpu_device_files_and_env(tmp_path):
    dev = tmp_path / "dev"
    (dev / "vfio").mkdir(parents=True)
    (dev / "accel0").touch()
    (dev / "vfio" / "0").touch()
    (dev / "vfio" / "vfio").touch()  # the control node is not a TPU
    hw = hardware.probe_hardware(dev=dev, proc=tmp_path / "proc", env={"TPU_ACCELERATOR_TYPE": "v5litepod-8"},
                               run=lambda argv: None, lockfile=tmp_path / "nolock")
    assert hw.tpu_device_files == [str(dev / "accel0"), str(dev / "vfio" / "0")]
    assert hw.tpu_env == {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}
    assert hw.has_tpu and not hw.has_nvidia


def test_hardware_probe_reads_nvidia_smi_then_proc_driver(tmp_path):
    smi = "NVIDIA H200, 550.54.15\nNVIDIA H200, 550.54.15\n"
    gpus, driver = hardware.probe_nvidia(lambda argv: smi if argv[0] == "nvidia-smi" else None, tmp_path)
    assert gpus == ["NVIDIA H200", "NVIDIA H200"] and driver == "550.54.15"

    nv = tmp_path / "driver" / "nvidia"
    (nv / "gpus" / "0000:00:04.0").mkdir(parents=True)
    (nv / "gpus" / "0000:00:04.0" / "information").write_text("Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ: 35\n")
    (nv / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Tue Oct 26\n")
    gpus, driver = hardware.probe_nvidia(lambda argv: None, tmp_path)
    assert gpus == ["NVIDIA A100-SXM4-40GB"] and driver == "470.82.01"


def test_tpu_holder_found_by_open_device_and_by_lock(tmp_path):
    proc = tmp_path / "proc"
    lock = tmp_path / "libtpu_lockfile"
    lock.touch()
    (proc / "4242" / "fd").mkdir(parents=True)
    os.symlink("/dev/accel0", proc / "4242" / "fd" / "7")
    (proc / "4242" / "cmdline").write_bytes(b"python\0train.py\0")
    st = lock.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    (proc / "locks").write_text(f"1: FLOCK  ADVISORY  WRITE 5151 {inode} 0 EOF\n")
    (proc / "5151" / "fd").mkdir(parents=True)
    holders = hardware.probe_tpu_holders(["/dev/accel0"], lock, proc, self_pid=1)
    assert holders == [{"pid": 4242, "command": "python train.py"}, {"pid": 5151, "command": ""}]
    assert hardware.probe_tpu_holders(["/dev/accel0"], lock, proc, self_pid=4242)[0]["pid"] == 5151


def test_cache_report_lists_kagglehub_and_hf_models(tmp_path):
    kaggle = tmp_path / "kh"
    (kaggle / "models" / "google" / "gemma-3" / "flax" / "gemma3-1b-it" / "1").mkdir(parents=True)
    hf = tmp_path / "hf"
    (hf / "models--google--gemma-3-1b-it").mkdir(parents=True)
    caches = doctor.cache_report({"KAGGLEHUB_CACHE": str(kaggle), "HF_HUB_CACHE": str(hf)})
    assert caches["kagglehub"]["models"] == ["google/gemma-3/flax/gemma3-1b-it/1"]
    assert caches["huggingface"]["models"] == ["google/gemma-3-1b-it"]
    missing = doctor.cache_report({"KAGGLEHUB_CACHE": str(tmp_path / "none"), "HF_HOME": str(tmp_path / "none")})
    assert missing["kagglehub"]["exists"] is False and missing["huggingface"]["path"].endswith("none/hub")


# --------------------------------------------------------------------------- mismatch messages

CPU_JAX = JaxProbe(backend="cpu", devices=[{"id": 0, "platform": "cpu", "kind": "cpu", "memory_bytes": None}])
TPU = Hardware(tpu_device_files=["/dev/accel0", "/dev/accel1"])
GPU = Hardware(nvidia_gpus=["NVIDIA H200"], nvidia_driver="550.54.15")


def _diagnose(hw, jx=CPU_JAX, vers=CPU_VERSIONS, env=None, repo=REPO):
    return doctor.diagnose(hw, jx, vers, env=env or {}, repo=repo, python="/venv/bin/python")


def test_tpu_present_but_cpu_jax_names_the_setup_command():
    [p] = _diagnose(TPU)
    assert "TPU is present" in p.message and "libtpu missing" in p.message
    assert p.fix == f"cd {REPO} && ACCEL=tpu make setup"
    [p] = _diagnose(TPU, repo=None)
    assert p.fix == '/venv/bin/python -m pip install -U "jax[tpu]"'


def test_tpu_held_by_another_process_names_it():
    held = Hardware(tpu_device_files=["/dev/vfio/0"], libtpu_lockfile=True,
                    tpu_holders=[{"pid": 4242, "command": "python -m adapters_lib.engine"}])
    [p] = _diagnose(held, vers={**CPU_VERSIONS, "libtpu": "0.0.20"})
    assert "in use by process 4242" in p.message and "adapters_lib.engine" in p.message
    assert p.fix.startswith("kill 4242")


def test_tpu_in_use_found_from_the_init_error_text():
    jx = JaxProbe(backend="cpu", messages=[
        "Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 777. "
        "Not attempting to load libtpu.so in this process."])
    [p] = _diagnose(TPU, jx, {**CPU_VERSIONS, "libtpu": "0.0.20"})
    assert "in use by process 777" in p.message and p.fix.startswith("kill 777")


def test_tpu_with_libtpu_but_cpu_backend_quotes_the_init_error():
    jx = JaxProbe(backend="cpu", messages=["Unable to initialize backend 'tpu': INTERNAL: no chips found"])
    [p] = _diagnose(TPU, jx, {**CPU_VERSIONS, "libtpu": "0.0.20"})
    assert "no chips found" in p.message and "ACCEL=tpu" in p.fix


def test_forced_cpu_platform_on_a_tpu_vm_says_unset_it():
    [p] = _diagnose(TPU, env={"JAX_PLATFORMS": "cpu"})
    assert "JAX_PLATFORMS=cpu" in p.message and p.fix == "unset JAX_PLATFORMS" and p.severity == "warning"


def test_gpu_present_but_cpu_jax_names_the_cuda_setup():
    [p] = _diagnose(GPU)
    assert "NVIDIA GPU is present (1× NVIDIA H200)" in p.message and "CPU build" in p.message
    assert p.fix == f"cd {REPO} && ACCEL=cuda make setup"
    [p] = _diagnose(GPU, repo=None)
    assert p.fix == '/venv/bin/python -m pip install -U "jax[cuda12]"'


def test_old_nvidia_driver_is_named_when_the_plugin_is_installed():
    old = Hardware(nvidia_gpus=["Tesla T4"], nvidia_driver="470.82.01")
    [p] = _diagnose(old, vers={**CPU_VERSIONS, "jax_cuda12_plugin": "0.12.0.1"})
    assert "470.82.01" in p.message and "driver" in p.fix


def test_matching_hardware_and_backend_report_no_problem():
    tpu_jax = JaxProbe(backend="tpu", devices=[{"id": 0, "platform": "tpu", "kind": "TPU v5 lite",
                                                "memory_bytes": 16 << 30}])
    assert _diagnose(TPU, tpu_jax, {**CPU_VERSIONS, "libtpu": "0.0.20"}) == []
    assert _diagnose(Hardware()) == []


def test_jax_that_cannot_start_is_a_problem():
    [p] = _diagnose(Hardware(), JaxProbe(error="RuntimeError: Unknown backend: 'gpu' requested"))
    assert "JAX could not start" in p.message and "Unknown backend" in p.message


# --------------------------------------------------------------------------- setup.sh detection


def _detect(env: dict[str, str]) -> str:
    script = REPO / "scripts" / "setup.sh"
    base = {k: v for k, v in os.environ.items() if k not in ("ACCEL", "TPU_NAME", "TPU_ACCELERATOR_TYPE")}
    out = subprocess.run(["bash", str(script), "--detect"], env={**base, **env}, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_setup_detection_picks_cpu_here_and_honours_accel():
    hw = hardware.probe_hardware()
    if hw.has_tpu or hw.has_nvidia:
        pytest.skip("this machine has an accelerator")
    assert _detect({}) == "cpu"
    for accel in ("cpu", "cuda", "tpu"):
        assert _detect({"ACCEL": accel}) == accel
    assert _detect({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}) == "tpu"


def test_setup_rejects_an_unknown_accel_before_installing_anything():
    out = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env={**os.environ, "ACCEL": "rocm"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "expected cpu, cuda or tpu" in out.stderr


def test_stale_libtpu_lockfile_is_named_when_nothing_holds_it():
    stale = Hardware(tpu_device_files=["/dev/accel0"], libtpu_lockfile=True)
    jx = JaxProbe(backend="cpu", messages=["libtpu.so already in use by another process. Not attempting to load"])
    [p] = _diagnose(stale, jx, {**CPU_VERSIONS, "libtpu": "0.0.20"})
    assert "stale" in p.message and p.fix == "rm /tmp/libtpu_lockfile"


def test_tpu_config_variables_set_by_libraries_do_not_mean_a_tpu(tmp_path):
    hw = hardware.probe_hardware(dev=tmp_path, proc=tmp_path, env={"TPU_SKIP_MDS_QUERY": "1"},
                               run=lambda argv: None, lockfile=tmp_path / "nolock")
    assert not hw.has_tpu and hw.tpu_env == {"TPU_SKIP_MDS_QUERY": "1"}
    assert _diagnose(hw, env={"JAX_PLATFORMS": "cpu"}) == []
