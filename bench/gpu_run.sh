#!/usr/bin/env bash
# The GPU benchmark in one run (BENCHMARKS.md, "On a GPU"): Gemma-3-1B shape, seq 2048, bf16.
#
#   bash bench/gpu_run.sh            on an NVIDIA machine, from the repo root
#   bash bench/gpu_run.sh --dry-run  the same imports and code path on the CPU, demo model
#   bash bench/gpu_run.sh --headline the MFU number only (no peak matmul, profile or variants)
#
# It uses the machine's own python3 and JAX (PYTHON=... to choose). Packages that machine
# lacks travel as wheels in .whl/ (installed with --target, ahead of its own); gemma's
# TensorFlow-only imports are stood in for when TensorFlow is absent (bench/import_stubs.py).
# Results: $OUT/gpu.json (raw rows, merge with `python -m bench --merge`), $OUT/gpu.log.
#
# The wheels (.whl/ is git-ignored; ~9 MB; what an image with JAX 0.11 + flax/optax/orbax but
# no gemma, kauldron or TensorFlow lacks), fetched here with the project's pinned versions:
#   .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl gemma==4.0.1 kauldron==1.4.4 grain==0.2.18 \
#     array_record==0.8.6 dialog==1.1.0 immutabledict==4.3.1 ipython==9.18.1 lark==1.3.1 \
#     mediapy==1.2.7 ml_collections==1.1.0 portpicker==1.6.0 traitlets==5.16.1 typeguard==4.6.1 \
#     flax==0.12.12 optax==0.2.8 etils==1.15.0 orbax-checkpoint==0.12.8 chex==0.1.92 treescope==0.1.10
set -euo pipefail
DATA=${GEMMA_WORKBENCH_HOME:+$GEMMA_WORKBENCH_HOME/data}  # adapters_lib.paths.data_dir
OUT=${OUT:-${DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/gemma-workbench}/bench/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/bench-site .whl/*.whl
  export PYTHONPATH=/tmp/bench-site:$PYTHONPATH
fi
export BENCH_STUB_MISSING=1 TF_CPP_MIN_LOG_LEVEL=3 PYTHONUNBUFFERED=1 BENCH_MFU_VARIANTS=1
if [[ ${1:-} == --headline ]]; then  # only the headline number (a short second run)
  export BENCH_MFU_HEADLINE_ONLY=1
fi
if [[ ${1:-} == --dry-run ]]; then
  export BENCH_MFU_DRY=1 JAX_PLATFORMS=cpu BENCH_PROFILE_DIR=/tmp/bench-profile-dry
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
  export BENCH_PROFILE_DIR=/tmp/bench-profile
fi
$PY -c "import jax, sys; print('jax', jax.__version__, jax.devices(), file=sys.stderr)"
$PY -m bench --quick --only gpu_mfu --json "$OUT/gpu.json" --out "$OUT/BENCHMARKS.gpu.md" 2>&1 | tee "$OUT/gpu.log"
