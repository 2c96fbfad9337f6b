#!/usr/bin/env bash
# Creates .venv (Python 3.12) and installs gemma-workbench with the JAX build that fits the
# machine: ACCEL=cpu|cuda|tpu overrides the detection. Idempotent: a stamp file records what
# was installed, so a second call is a no-op unless pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
EXTRAS=${EXTRAS:-dev}

find_python() {
  for c in "${PYTHON:-}" python3.12; do
    [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$c"; return; }
  done
  for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
  echo "error: Python 3.12 not found; install it (e.g. 'apt-get install python3.12-venv') or set PYTHON=/path/to/python3.12" >&2
  exit 1
}

detect_accel() {
  if [ -n "${ACCEL:-}" ]; then echo "$ACCEL"; return; fi
  if compgen -G "/dev/accel[0-9]*" >/dev/null || compgen -G "/dev/vfio/[0-9]*" >/dev/null \
     || [ -n "${TPU_NAME:-}" ] || [ -n "${TPU_ACCELERATOR_TYPE:-}" ]; then echo tpu; return; fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda; return; fi
  echo cpu
}

accel=$(detect_accel)
case "$accel" in cpu|cuda|tpu) ;; *) echo "error: ACCEL=$accel; expected cpu, cuda or tpu" >&2; exit 2;; esac
# `scripts/setup.sh --detect` prints the platform it would install for, and installs nothing.
if [ "${1:-}" = "--detect" ]; then echo "$accel"; exit 0; fi
if [ "$accel" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)
  if [ -n "$driver" ] && [ "$driver" -lt 525 ] 2>/dev/null; then
    echo "warning: NVIDIA driver $driver is older than 525, the minimum for jax[cuda12]; upgrade the driver" >&2
  fi
fi
stamp="$VENV/.installed-$accel-$EXTRAS"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi

py=$(find_python)
[ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
extras="$EXTRAS"
[ "$accel" != cpu ] && extras="$extras,$accel"
echo "gemma-workbench: installing into $VENV for $accel (extras: $extras)" >&2
"$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[${extras}]"
rm -f "$VENV"/.installed-*
echo "$want" > "$stamp"
