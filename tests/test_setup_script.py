"""scripts/setup.sh, run for real in a sandbox: which Python 3.12 it takes (uv when none is on
the machine, a one-line error when uv cannot get one) and what it detects as a TPU.

The sandbox is a PATH of symlinks to the few tools the script calls, a throw-away HOME and a
fake /dev + /sys tree (``ACCEL_PROBE_ROOT``), so the machine's own Pythons and devices do not
decide the answer. Nothing here touches the network: uv's downloads point at a missing local
mirror.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"
TOOLS = ("bash", "cat", "dirname", "grep", "sed", "tail", "head", "awk", "cut", "sha256sum", "env")


def _sandbox_path(tmp_path: Path, **links: str) -> Path:
    """A bin folder holding only the script's tools and the given ``name=target`` links."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    wanted = {tool: shutil.which(tool) for tool in TOOLS} | links
    for name, target in wanted.items():
        if target and not (bin_ / name).is_symlink():
            (bin_ / name).symlink_to(target)
    return bin_


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, **links: str):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": str(_sandbox_path(tmp_path, **links)), "HOME": str(home),
            "PYENV_ROOT": str(tmp_path / "no-pyenv"), "PIP_CONFIG_FILE": os.devnull,
            "UV_PYTHON_INSTALL_DIR": str(tmp_path / "uv-python"), "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "ACCEL_PROBE_ROOT": str(tmp_path / "root")}
    return subprocess.run([shutil.which("bash"), str(SETUP), *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def _system_python312() -> str | None:
    """A Python 3.12 at the absolute paths the script also looks at (the sandbox cannot hide it)."""
    for p in ("/usr/local/bin/python3.12", "/usr/bin/python3.12"):
        if os.access(p, os.X_OK):
            return p
    return None


def _uv() -> str | None:
    """A real uv: on the PATH, or the one setup.sh bootstraps into ~/.cache/gemma-workbench/uv."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gemma-workbench/uv/bin/uv"
    return shutil.which("uv") or (str(cache) if os.access(cache, os.X_OK) else None)


def _other_python_with_pip() -> str | None:
    """A Python that is not 3.12 and has pip (what a Cloud TPU VM's system python3 is)."""
    for name in ("python3.11", "python3.10", "python3.13", "python3", "/usr/bin/python3"):
        exe = shutil.which(name)
        if not exe:
            continue
        probe = subprocess.run([exe, "-c", "import sys, pip; assert sys.version_info[:2] != (3, 12); "
                                "print(sys.executable)"], capture_output=True, text=True)
        if probe.returncode == 0:
            return probe.stdout.strip()  # the interpreter itself, not a pyenv shim
    return None


# --------------------------------------------------------------------------- the Python it takes


def test_python312_on_the_path_is_taken(tmp_path):
    out = _run(tmp_path, "--find-python", **{"python3.12": sys.executable})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "bin" / "python3.12")


def test_python_that_is_not_312_is_one_line_naming_it(tmp_path):
    other = _other_python_with_pip()
    if other is None:
        pytest.skip("no Python other than 3.12 on this machine")
    out = _run(tmp_path, "--find-python", env={"PYTHON": other})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and f"PYTHON={other} is not a Python 3.12" in out.stderr


def test_no_python_and_no_uv_is_one_line_saying_what_to_do(tmp_path):
    if _system_python312():
        pytest.skip(f"{_system_python312()} is on this machine: the script finds it")
    out = _run(tmp_path, "--find-python")
    assert out.returncode == 1 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert "Python 3.12 not found" in line and "no uv, and no python3 with pip" in line
    assert "PYTHON=/path/to/python3.12" in line and "apt-get install python3.12-venv" in line


def test_uv_bootstrap_that_cannot_reach_pypi_is_one_line(tmp_path):
    """A TPU VM's python3 (3.10, with pip) and no index: pip cannot install uv, said in one line."""
    other = _other_python_with_pip()
    if other is None or _system_python312():
        pytest.skip("needs a non-3.12 Python with pip and no system Python 3.12")
    (tmp_path / "no-wheels").mkdir()
    out = _run(tmp_path, "--find-python", env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "no-wheels")},
               python3=other)
    assert out.returncode == 1
    assert "installing uv from PyPI" in out.stderr  # it tried, and said so
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Python 3.12 not found") and "pip could not install uv from PyPI" in last
    assert not (tmp_path / "home/.cache/gemma-workbench/uv/bin/uv").exists()


@pytest.fixture
def uv_bin(tmp_path):
    uv = _uv()
    if uv is None:
        pytest.skip("no uv here (setup.sh installs one from PyPI when it needs it)")
    return {"uv": uv}


def test_python_that_uv_manages_is_taken(tmp_path, uv_bin):
    """uv's managed installs (what `uv python install 3.12` leaves) are found by `uv python find`."""
    managed = tmp_path / "uv-python" / "cpython-3.12.1-linux-x86_64-gnu" / "bin"
    managed.mkdir(parents=True)
    real = Path(sys.executable).resolve()  # the interpreter behind this venv
    (managed / "python3.12").symlink_to(real)
    (managed / "python3").symlink_to("python3.12")
    out = _run(tmp_path, "--find-python", **uv_bin)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(managed / "python3.12")
    assert "installing" not in out.stderr


def test_uv_that_cannot_download_python_is_one_line(tmp_path, uv_bin):
    """No network to github.com (here: a mirror that does not exist): one line, what failed, what to do."""
    if _system_python312():
        pytest.skip(f"{_system_python312()} is on this machine: the script finds it")
    out = _run(tmp_path, "--find-python", env={"UV_PYTHON_INSTALL_MIRROR": (tmp_path / "none").as_uri()}, **uv_bin)
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0].startswith("gemma-workbench: installing Python 3.12 with") and len(lines) == 2
    assert "'uv python install 3.12' failed" in lines[1] and "PYTHON=/path/to/python3.12" in lines[1]


# --------------------------------------------------------------------------- what it detects


def _detect(tmp_path, env=None, **files: str):
    root = tmp_path / "root"
    for rel, text in files.items():
        f = root / rel.replace("__", "/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    out = _run(tmp_path, "--detect", env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr.strip()


def test_a_v5e_pci_function_is_a_tpu(tmp_path):
    accel, why = _detect(tmp_path, **{"sys__bus__pci__devices__0000:00:05.0__vendor": "0x1ae0\n",
                                      "sys__bus__pci__devices__0000:00:05.0__device": "0x0063\n"})
    assert accel == "tpu" and "1ae0:0063" in why


def test_google_nic_and_disk_are_not_a_tpu(tmp_path):
    """Every GCE VM has Google PCI devices (gVNIC 0x0042, NVMe 0x001f): vendor alone is not a TPU."""
    accel, why = _detect(tmp_path, **{"sys__bus__pci__devices__0000:00:04.0__vendor": "0x1ae0\n",
                                      "sys__bus__pci__devices__0000:00:04.0__device": "0x0042\n",
                                      "sys__bus__pci__devices__0000:00:03.0__vendor": "0x1ae0\n",
                                      "sys__bus__pci__devices__0000:00:03.0__device": "0x001f\n"})
    assert accel == "cpu" and "no TPU or NVIDIA GPU" in why


@pytest.mark.parametrize("node", ["dev__accel0", "dev__vfio__0", "sys__class__accel__accel0"])
def test_tpu_device_nodes_are_a_tpu(tmp_path, node):
    accel, why = _detect(tmp_path, **{node: ""})
    assert accel == "tpu" and why.endswith(node.replace("__", "/") + ")")


def test_tpu_environment_is_a_tpu_and_accel_wins(tmp_path):
    assert _detect(tmp_path, env={"TPU_ACCELERATOR_TYPE": "v5litepod-1"})[0] == "tpu"
    assert _detect(tmp_path, env={"TPU_NAME": "wb-tpu"})[0] == "tpu"
    assert _detect(tmp_path, env={"TPU_SKIP_MDS_QUERY": "1"})[0] == "cpu"  # libraries set this one
    assert _detect(tmp_path, env={"TPU_ACCELERATOR_TYPE": "v5litepod-1", "ACCEL": "cpu"}) == ("cpu", "setup.sh: cpu (ACCEL=cpu)")
