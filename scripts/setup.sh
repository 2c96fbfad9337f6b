#!/usr/bin/env bash
# Creates .venv (Python 3.12) and installs gemma-workbench with the JAX build that fits the
# machine: ACCEL=cpu|cuda|tpu overrides the detection. Idempotent: a stamp file records what
# was installed, so a second call is a no-op unless pyproject.toml or constraints.txt changed.
#   scripts/setup.sh --detect        prints the platform it would install for (cpu|cuda|tpu)
#   scripts/setup.sh --find-python   prints the Python 3.12 it would use (getting one with uv
#                                    when none is found); neither installs the project
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
EXTRAS=${EXTRAS:-dev}
# where the bootstrap uv goes when none is on the PATH (pip --target: no venv module, no
# --user site, no externally-managed refusal needed)
UV_HOME=${GEMMA_WORKBENCH_UV_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/gemma-workbench/uv}
# a prefix for the /dev and /sys paths the detection reads (tests point it at a fake tree)
ROOT=${ACCEL_PROBE_ROOT:-}

is_py312() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; }
# ... that can make a venv (Debian/Ubuntu's python3.12 cannot without python3.12-venv)
makes_venv() { is_py312 "$1" && "$1" -c 'import ensurepip, venv' >/dev/null 2>&1; }

# uv on the PATH, else the bootstrap one, else installed now from PyPI with whatever python3
# has pip (a Cloud TPU VM's system Python 3.10 does). Prints its path, or fails printing why.
uv_bin() {  # $1: what uv is wanted for (said when it must be installed first)
  if command -v uv >/dev/null 2>&1; then command -v uv; return; fi
  if [ -x "$UV_HOME/bin/uv" ]; then echo "$UV_HOME/bin/uv"; return; fi
  local boot
  for boot in python3 python3.11 python3.10 python3.13 python; do
    command -v "$boot" >/dev/null 2>&1 && "$boot" -m pip --version >/dev/null 2>&1 || continue
    echo "gemma-workbench: installing uv from PyPI into $UV_HOME ${1:-to get a Python 3.12}" >&2
    "$boot" -m pip install -q --disable-pip-version-check --target "$UV_HOME" uv >&2 \
      && [ -x "$UV_HOME/bin/uv" ] && { echo "$UV_HOME/bin/uv"; return; }
    echo "pip could not install uv from PyPI"
    return 1
  done
  echo "no uv, and no python3 with pip to install it"
  return 1
}

# A Python 3.12 that uv manages (~/.local/share/uv/python): one installed before, else
# `uv python install 3.12` (a python-build-standalone build from github.com). Only uv's own
# builds: the system and pyenv ones were looked at before.
python_from_uv() {
  local uv py err
  uv=$(uv_bin "(no Python 3.12 found) to get one") || { uv_failure=$uv; return 1; }
  export UV_PYTHON_PREFERENCE=only-managed
  if py=$("$uv" python find 3.12 2>/dev/null) && is_py312 "$py"; then echo "$py"; return; fi
  echo "gemma-workbench: installing Python 3.12 with $uv (uv python install 3.12)" >&2
  if ! err=$("$uv" python install 3.12 2>&1 >/dev/null); then
    local cause
    cause=$(printf '%s\n' "$err" | grep -v '^[[:space:]]*$' | tail -1 | sed 's/^ *//; s/^cause: //')
    case "$err" in
      *"Failed to download"*) uv_failure="'uv python install 3.12' could not download a Python build: $cause";;
      *) uv_failure="'uv python install 3.12' failed: $cause";;
    esac
    return 1
  fi
  if py=$("$uv" python find 3.12 2>/dev/null) && is_py312 "$py"; then echo "$py"; return; fi
  uv_failure="uv installed Python 3.12 but 'uv python find 3.12' does not give it"
  return 1
}

find_python() {
  local c
  if [ -n "${PYTHON:-}" ]; then
    makes_venv "$PYTHON" && { echo "$PYTHON"; return; }
    if is_py312 "$PYTHON"; then
      echo "error: PYTHON=$PYTHON cannot make a venv (no ensurepip); install its venv package (Ubuntu: 'sudo apt-get install python3.12-venv'), or unset PYTHON to let setup get a Python 3.12 with uv" >&2
    else
      echo "error: PYTHON=$PYTHON is not a Python 3.12 (gemma 4 needs 3.12); point it at one, or unset it to let setup find or install one" >&2
    fi
    exit 1
  fi
  for c in python3.12 python3; do
    command -v "$c" >/dev/null 2>&1 && makes_venv "$c" && { command -v "$c"; return; }
  done
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [ -x "$c" ] && makes_venv "$c" && { echo "$c"; return; }
  done
  uv_failure=""
  python_from_uv && return
  echo "error: Python 3.12 not found, and uv could not get one ($uv_failure); install Python 3.12 and rerun with PYTHON=/path/to/python3.12 (Ubuntu: 'sudo apt-get install python3.12-venv', on 22.04 after 'sudo add-apt-repository ppa:deadsnakes/ppa'; docs/accelerators.md)" >&2
  exit 1
}

# A Google TPU PCI function (vendor 0x1ae0; device ids as JAX's hardware_utils lists them:
# v2/v3, v4, v5p, v5e, v6e, TPU7x and later). Vendor 0x1ae0 alone is not enough: every GCE VM's
# gVNIC and NVMe are Google devices too.
TPU_PCI_IDS="0x0027 0x0056 0x005e 0x0062 0x0063 0x006f 0x0076 0x007c 0x0083"
tpu_pci() {
  local v d
  for v in "$ROOT"/sys/bus/pci/devices/*/vendor; do
    [ -r "$v" ] && [ "$(cat "$v" 2>/dev/null)" = 0x1ae0 ] || continue
    d=$(cat "${v%/vendor}/device" 2>/dev/null) || continue
    case " $TPU_PCI_IDS " in *" $d "*) echo "PCI ${v%/vendor} (1ae0:${d#0x})"; return;; esac
  done
  if [ -z "$ROOT" ] && command -v lspci >/dev/null 2>&1; then  # sysfs without a PCI tree (sandboxes)
    d=$(lspci -n -d 1ae0: 2>/dev/null | awk '{print "0x" substr($3, 6)}' | head -20) || true
    for v in $d; do case " $TPU_PCI_IDS " in *" $v "*) echo "lspci 1ae0:${v#0x}"; return;; esac; done
  fi
  return 1
}

# Why this is a TPU machine (one line), or nothing. No network: GCE metadata is not asked.
tpu_evidence() {
  local f
  for f in "$ROOT"/dev/accel[0-9]* "$ROOT"/dev/vfio/[0-9]* "$ROOT"/sys/class/accel/accel[0-9]*; do
    [ -e "$f" ] && { echo "$f"; return; }
  done
  tpu_pci && return
  [ -n "${TPU_ACCELERATOR_TYPE:-}" ] && { echo "TPU_ACCELERATOR_TYPE=$TPU_ACCELERATOR_TYPE"; return; }
  [ -n "${TPU_NAME:-}" ] && { echo "TPU_NAME=$TPU_NAME"; return; }
  return 1
}

# Sets accel (cpu|cuda|tpu) and why (one line: what it was detected from).
detect_accel() {
  if [ -n "${ACCEL:-}" ]; then accel=$ACCEL; why="ACCEL=$ACCEL"; return; fi
  if why=$(tpu_evidence); then accel=tpu; return; fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    accel=cuda; why="nvidia-smi -L lists a GPU"; return
  fi
  accel=cpu; why="no TPU or NVIDIA GPU found"
}

if [ "${1:-}" = "--find-python" ]; then find_python; exit 0; fi
detect_accel
case "$accel" in cpu|cuda|tpu) ;; *) echo "error: ACCEL=$accel; expected cpu, cuda or tpu" >&2; exit 2;; esac
# `scripts/setup.sh --detect` prints the platform it would install for (stdout) and what it
# was detected from (stderr), and installs nothing.
if [ "${1:-}" = "--detect" ]; then echo "$accel"; echo "setup.sh: $accel ($why)" >&2; exit 0; fi
if [ "$accel" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)
  if [ -n "$driver" ] && [ "$driver" -lt 525 ] 2>/dev/null; then
    echo "warning: NVIDIA driver $driver is older than 525, the minimum for jax[cuda12]; upgrade the driver" >&2
  fi
fi
stamp="$VENV/.installed-$accel-$EXTRAS"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

if ! is_py312 "$VENV/bin/python"; then  # none yet, or one of another Python (or its base gone)
  py=$(find_python)
  if [ -e "$VENV" ]; then
    echo "gemma-workbench: $VENV is not a Python 3.12 venv; recreating it with $py" >&2
    "$py" -m venv --clear "$VENV"
  else
    "$py" -m venv "$VENV"
  fi
fi
extras="$EXTRAS"
[ "$accel" != cpu ] && extras="$extras,$accel"
echo "gemma-workbench: installing into $VENV for $accel (extras: $extras)" >&2
# uv installs the same pinned set as pip (constraints.txt) in ~8 s from its cache, ~30 s from
# PyPI, where pip takes 2-4 minutes on 2 cores; pip when uv cannot be had or fails
# (GEMMA_WORKBENCH_INSTALLER=pip asks for pip)
if [ "${GEMMA_WORKBENCH_INSTALLER:-uv}" = uv ] && uv=$(uv_bin "to install the packages" 2>/dev/null) \
    && "$uv" pip install -q --python "$VENV/bin/python" -c constraints.txt -e ".[${extras}]"; then
  :
else
  [ "${GEMMA_WORKBENCH_INSTALLER:-uv}" = uv ] && echo "gemma-workbench: uv did not install; installing with pip" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[${extras}]"
fi
rm -f "$VENV"/.installed-*
echo "$want" > "$stamp"
