#!/usr/bin/env bash
# The workbench on a TPU machine that has no package index for our pins (e.g. a TPU v5e host
# with Python 3.11, no registry and no TensorFlow). Everything travels: a
# Python 3.12, the cp312 wheels of jaxlib and libtpu, the site packages the engine needs, in
# parts of at most 48 MiB (PART_MB); the project itself is the working tree the command runs in.
#
#   scripts/tpu_device.sh build [DIR] [--with-270m]
#                                        here, after `make setup`: DIR/cpartNN/ (default .tpu),
#                                        one folder to carry per call; --with-270m: the real
#                                        Gemma 3 270M's GGUF chunks too (+245 MB, stored: Q4
#                                        data does not compress), which `check keras` trains
#   scripts/tpu_device.sh receive [DIR]  there: keep the carried part(s) in /tmp/tpu-parts
#   scripts/tpu_device.sh install        there: check the parts, unpack (~20 s)
#   scripts/tpu_device.sh check NAME…    there: run named checks (list: `check --list`);
#                                        results under $OUT (default: bench/tpu in the
#                                        data dir, ~/.local/share/gemma-workbench)
#   scripts/tpu_device.sh env            print the environment lines the checks run with
#   scripts/tpu_device.sh simulate       here: the same install (--with-270m) made of links into
#                                        .venv, what the bundle leaves out (TensorFlow…) absent, so
#                                        `TPU_WB_ROOT=… scripts/tpu_device.sh check NAME` runs the
#                                        chip's checks on this CPU
#
# A real Cloud TPU VM needs none of this: `make run` installs there (README, "Cloud TPU").
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PARTS=/tmp/tpu-parts
ROOT=${TPU_WB_ROOT:-/tmp/tpu-wb}
DATA=${GEMMA_WORKBENCH_HOME:+$GEMMA_WORKBENCH_HOME/data}  # adapters_lib.paths.data_dir, before load_env moves HOME
OUT=${OUT:-${DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/gemma-workbench}/bench/tpu}
PART_MB=${PART_MB:-48}  # the working tree (~9 MiB) travels beside each part, under the 64 MiB a call carries

# packages the engine never runs (TensorFlow and its kin: the Keras route imports it by name
# only, adapters_lib.import_shields.tf_absent; notebooks and cloud clients), the jaxlib built for this machine,
# and the 270M's GGUF chunks. keras, keras_hub and h5py travel (the Keras route: ~14 MiB of xz).
EXCLUDE='^(tensorflow|tensorboard$|tensorboard[-_]|jaxlib|transformers|kubernetes|opencv|cv2|googleapiclient|pandas|pyarrow|clang|gemma3_270m|sklearn|scikit|matplotlib|skimage|fontTools|sqlalchemy|networkx|nltk|pip|ruff|libclang|tf_keras|_pytest|pytest|xdist|syrupy|datasets|hf_xet|vertexai|agentplatform|sympy|mpmath|import_linter|grimp)'

site_dir() { "$REPO/.venv/bin/python" -c 'import site; print(site.getsitepackages()[0])'; }
# the site-packages entries the bundle carries (one a line)
site_entries() { ls "$(site_dir)" | grep -viE "$EXCLUDE" | grep -v '^__editable__\|^gemma_workbench'; }

build() {
  local out=.tpu with_270m=0 a tmp b
  for a in "$@"; do case $a in --with-270m) with_270m=1 ;; -*) echo "error: unknown option $a" >&2; exit 2 ;; *) out=$a ;; esac; done
  [ -x .venv/bin/python ] || { echo "error: no .venv; run 'make setup' first" >&2; exit 1; }
  tmp=$(mktemp -d); b=$tmp/bundle; mkdir -p "$b" "$out"; rm -rf "$out"/cpart*
  local pyroot; pyroot=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')
  echo "python: $pyroot" >&2
  tar -C "$(dirname "$pyroot")" -cf - --exclude='*/test' --exclude='*/idlelib' --exclude='*/tkinter' \
    --exclude='*/turtledemo' --exclude='*/config-3.12-*' --exclude='__pycache__' --exclude='*/site-packages' \
    --exclude='*/libpython3.12.a' --exclude='*/include' --exclude='*/share' "$(basename "$pyroot")" | xz -T0 -6 > "$b/python.tar.xz"
  basename "$pyroot" > "$b/python.name"
  local jaxlib; jaxlib=$(.venv/bin/python -c 'import jaxlib; print(jaxlib.__version__)')
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$b" "jaxlib==$jaxlib" "libtpu==${LIBTPU:-0.0.50.*}"
  local sp entries; sp=$(site_dir); entries=$(site_entries)  # both read .venv: before the cd
  ( cd "$sp" && echo "$entries" | xargs tar -cf - --exclude='google/cloud' --exclude='google/genai' --exclude='__pycache__' ) \
    | xz -T0 -6 > "$b/site.tar.xz"
  if [ $with_270m = 1 ]; then ( cd "$sp" && ls -d gemma3_270m* | xargs tar -cf - ) > "$b/starter.tar"; fi
  # the real 270M's tokenizer (262k vocabulary), rebuilt from its GGUF: `check decode` needs one
  .venv/bin/python -c 'import shutil, sys; from adapters_lib.models import starter; from adapters_lib.models.gguf import gguf_tokenizer
shutil.copy(gguf_tokenizer.tokenizer_for_gguf(starter.ensure_starter()), sys.argv[1])' "$b/tokenizer.model"
  ( cd "$b" && sha256sum ./* > SHA256SUMS )
  tar -C "$tmp" -cf - bundle | split -b "${PART_MB}M" -d -a 2 - "$out/part"
  for f in "$out"/part*; do mkdir -p "$out/c${f##*/}"; mv "$f" "$out/c${f##*/}/"; done
  ls "$out" | grep -c cpart > "$out/cpart00/COUNT"
  rm -rf "$tmp"
  du -sh "$out"/cpart* >&2
  echo "carry each of: $(cd "$out" && ls -d cpart* | tr '\n' ' ')" >&2
}

receive() {
  local from=${1:-.tpu}
  mkdir -p "$PARTS"
  mv "$from"/cpart*/* "$PARTS"/ 2>/dev/null || true
  echo "parts here: $(ls "$PARTS" | grep -c '^part') of $(cat "$PARTS/COUNT" 2>/dev/null || echo '?')"
}

install() {
  local t0; t0=$(date +%s)
  [ -f "$PARTS/COUNT" ] || { echo "error: no parts in $PARTS (receive them first)" >&2; exit 1; }
  local have; have=$(ls "$PARTS" | grep -c '^part')
  [ "$have" = "$(cat "$PARTS/COUNT")" ] || { echo "error: $have of $(cat "$PARTS/COUNT") parts" >&2; exit 1; }
  rm -rf "$ROOT"; mkdir -p "$ROOT"
  cat "$PARTS"/part* | tar -xf - -C "$ROOT"
  ( cd "$ROOT/bundle" && sha256sum -c --quiet SHA256SUMS )
  mkdir -p "$ROOT/py" "$ROOT/site"
  tar -xJf "$ROOT/bundle/python.tar.xz" -C "$ROOT/py"
  cp "$ROOT/bundle/python.name" "$ROOT/python.name"
  tar -xJf "$ROOT/bundle/site.tar.xz" -C "$ROOT/site"
  if [ -f "$ROOT/bundle/starter.tar" ]; then tar -xf "$ROOT/bundle/starter.tar" -C "$ROOT/site"; fi
  load_env
  for w in "$ROOT"/bundle/jaxlib-*.whl "$ROOT"/bundle/libtpu-*.whl; do "$PY" -m zipfile -e "$w" "$ROOT/site"; done
  if [ -f "$ROOT/bundle/tokenizer.model" ]; then cp "$ROOT/bundle/tokenizer.model" "$ROOT/tokenizer.model"; fi
  rm -rf "$ROOT/bundle" "$PARTS"
  echo "installed in $(( $(date +%s) - t0 )) s"
}

simulate() {
  [ -x .venv/bin/python ] || { echo "error: no .venv; run 'make setup' first" >&2; exit 1; }
  local pyroot sp e; pyroot=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)'); sp=$(site_dir)
  rm -rf "$ROOT"; mkdir -p "$ROOT/py" "$ROOT/site"
  ln -s "$pyroot" "$ROOT/py/$(basename "$pyroot")"
  basename "$pyroot" > "$ROOT/python.name"
  for e in $(site_entries) $(cd "$sp" && ls -d jaxlib jaxlib-* gemma3_270m*); do ln -s "$sp/$e" "$ROOT/site/$e"; done
  echo "simulated in $ROOT: $(ls "$ROOT/site" | wc -l) site entries (left out: $(ls "$sp" | grep -ciE "^tensorflow") tensorflow* ones)" >&2
}

load_env() {
  local name; name=$(cat "$ROOT/python.name")
  export LD_LIBRARY_PATH=$ROOT/py/$name/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  PY=$ROOT/py/$name/bin/python3.12
  export PYTHONPATH=$REPO:$ROOT/site   # not the machine's own JAX
  export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
  if [ -f "$ROOT/tokenizer.model" ]; then export TOKENIZER=${TOKENIZER:-$ROOT/tokenizer.model}; fi
  local h=${TPU_WB_HOME:-/tmp/tpu-home}; mkdir -p $h/run && chmod 700 $h/run
  export HOME=$h XDG_RUNTIME_DIR=$h/run XDG_STATE_HOME=$h/state XDG_DATA_HOME=$h/data \
    XDG_CACHE_HOME=$h/cache XDG_CONFIG_HOME=$h/config
  mkdir -p "$ROOT/bin"
  printf '#!/bin/sh\nexec %s -m workbench "$@"\n' "$PY" > "$ROOT/bin/gemma-workbench"
  chmod +x "$ROOT/bin/gemma-workbench"
  export PATH=$ROOT/bin:$ROOT/py/$name/bin:$PATH
  # packages the bundle leaves out that gemma's import chain names (never TensorFlow: the gemma
  # route must run without it); bench/import_stubs stands in only for what is not installed
  printf 'try:\n    from bench import import_stubs as _s\n    _s.install(tuple(r for r in _s.ROOTS if r != "tensorflow") + ("pandas", "matplotlib", "sklearn"))\nexcept Exception as e:\n    print("stubs not installed:", e)\n' \
    > "$ROOT/site/sitecustomize.py"
  WB=$ROOT/bin/gemma-workbench
}

CHECKS="jax ce speed ratio first-step behind compile flow tui decode big memory bench keras loop family beside gil"
check() {
  [ "${1:-}" = --list ] && { echo "$CHECKS"; return; }
  load_env
  mkdir -p "$OUT"
  local name
  for name in "$@"; do
    echo "=== check $name ($(date -u +%T))"
    case $name in
      jax)
        bash scripts/setup.sh --detect
        "$PY" -c 'import jax, jaxlib, sys; d = jax.devices()[0]; print("python", sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, d.device_kind, jax.device_count(), "bytes_limit", d.memory_stats().get("bytes_limit"))'
        "$PY" -c 'import importlib.metadata as m; print("libtpu", m.version("libtpu"), "gemma", m.version("gemma"), "flax", m.version("flax"))' ;;
      ce|speed|ratio|first-step|behind|decode|big|memory)
        "$PY" -m bench.tpu_speed "$name" --out "$OUT" ;;
      compile) "$PY" -m bench.compile_time --out "$OUT/compile_time.json" \
          --flags none "${COMPILE_FLAGS:-xla_tpu_impure_hlo_parallel_compile=true}" ;;
      flow) bash scripts/tpu_flow.sh "$WB" "$OUT" ;;
      tui) "$PY" -m bench.tui_screens --out "$OUT/tui" && tar -C "$OUT" -czf "$OUT/tui-screens.tgz" tui && rm -rf "$OUT/tui" ;;
      # the Keras route: the v5e-8 plan, the IMDB example through the CLI, both routes' speed, the TUI's
      # screens (KERAS_PARTS: some of plan,flow,speed,tui); bench/keras_chip.py
      keras) "$PY" -m bench.keras_chip --out "$OUT" --wb "$WB" --parts "${KERAS_PARTS:-plan,flow,speed,tui}" \
          --speed-steps "${KERAS_SPEED_STEPS:-60}" ;;
      # the interactive loop in one engine: tweak, launch, compare, eval; LOOP_MODELS: some of
      # 270m (the real 270M, README config: needs the bundle --with-270m), 1b (random weights, 4 × 2048)
      loop) for m in ${LOOP_MODELS:-270m 1b}; do "$PY" -m bench.tpu_loop --model "$m" --out "$OUT" \
          --steps "${LOOP_STEPS:-20}" || return 1; done ;;
      family) "$PY" -m bench.family_cost --out "$OUT" ;;  # the family's program against the exact one
      # a step and an eval beside a thread busy in Python: the GIL's waits, 5 ms and 0.5 ms switch interval
      gil) "$PY" -m bench.gil_waits --out "$OUT" ;;
      # a compile's phases (XLA, serialize, load) against the steps running beside it, device empty and full
      beside) "$PY" -m bench.compile_beside_steps --out "$OUT" --layers "${BESIDE_LAYERS:-64}" --fill "${BESIDE_FILL:-0,0.95}" ;;
      bench) BENCH_STUB_MISSING=1 "$PY" -m bench --quick --only ${BENCH_ONLY:-ab_pair} --json "$OUT/bench.json" --out "$OUT/BENCHMARKS.tpu.md" ;;
      *) echo "unknown check $name; one of: $CHECKS" >&2; return 2 ;;
    esac
  done
}

case ${1:-} in
  build) shift; build "$@" ;;
  receive) shift; receive "$@" ;;
  install) install ;;
  check) shift; check "$@" ;;
  simulate) simulate ;;
  env) load_env; echo "PY=$PY"; echo "PYTHONPATH=$PYTHONPATH"; echo "WB=$WB"; echo "TOKENIZER=${TOKENIZER:-}" ;;
  *) sed -n 2,23p "$0"; exit 2 ;;
esac
