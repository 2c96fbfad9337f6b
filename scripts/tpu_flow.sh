#!/usr/bin/env bash
# The README's flow through the CLI, on whatever device the engine finds (scripts/tpu_device.sh
# check flow runs it on a TPU): models → configure (the estimate) → launch (detached) → live
# loss (attach) → compare → export, then the engine stops (it holds the chip).
#   bash scripts/tpu_flow.sh [GEMMA_WORKBENCH] [OUTDIR]
# The transcript: OUTDIR/flow.log (each command, its seconds and its output); OUTDIR defaults
# to $OUT, else bench/flow in the data dir.
set -uo pipefail
WB=${1:-.venv/bin/gemma-workbench}
DATA=${GEMMA_WORKBENCH_HOME:+$GEMMA_WORKBENCH_HOME/data}
OUT=${2:-${OUT:-${DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/gemma-workbench}/bench/flow}}
CONFIG=${FLOW_CONFIG:-examples/demo.toml}
mkdir -p "$OUT"
LOG=$OUT/flow.log
: > "$LOG"
fail=0

step() {  # step TITLE CMD...: run, time, keep the output
  local title=$1; shift
  local t0=$SECONDS
  echo "### $title: $*" | tee -a "$LOG"
  "$@" > "$OUT/.step" 2>&1
  local rc=$?
  cat "$OUT/.step" >> "$LOG"
  echo "### -> exit $rc in $(( SECONDS - t0 )) s" | tee -a "$LOG"
  [ $rc -eq 0 ] || fail=1
  return $rc
}

step doctor "$WB" doctor
step models "$WB" models
step configure "$WB" train "$CONFIG" --estimate
step launch "$WB" train "$CONFIG" --detach
RUN=$(head -1 "$OUT/.step")
step "live loss" "$WB" runs attach "$RUN"
grep -E "step|loss" "$OUT/.step" | tail -3
step status "$WB" runs show "$RUN"
step compare "$WB" compare --run "$RUN" --prompt "Is 17 even or odd?"
step export "$WB" export "$RUN" --format adapter --out /tmp/tpu-flow-adapter --force
ls -la /tmp/tpu-flow-adapter >> "$LOG" 2>&1
step "engine stop" "$WB" engine stop
rm -f "$OUT/.step"
echo "flow: $([ $fail -eq 0 ] && echo ok || echo FAILED) (transcript: $LOG)"
exit $fail
