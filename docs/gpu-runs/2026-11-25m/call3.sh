#!/usr/bin/env bash
# Forty-fifth session, call 3: records made across a limit change are not kept as variants (the
# last step's record at the change and the record of the step that saw it), on gpt2var, against
# HEAD db46700's library (.carry/v-head/src/libvmem.so.0, built by scripts/gpu-run.sh prepare
# before the change), by_shape off in both (the default). X: this tree's library, naive,
# planned+offload and the uncut process; H: HEAD's, planned+offload; then X2, H2 (planned+offload),
# each with X's naive and uncut JSON for the per-step report. Then GPT-2 (steps alike) with
# this tree's library, planned+offload, for a check that a job whose steps repeat is unchanged.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/v-head
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25m/call3.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
NEW=$VMEM_LIBRARY
OLD=$PWD/.carry/v-head/src/libvmem.so.0
run() {  # DIR MODES UNCUT LIB [env...]
    local d=$1 modes=$2 uncut=$3 lib=$4; shift 4
    env OUT=$ROOT/$d VMEM_LIBRARY=$lib VMEM_LOG_LEVEL=debug CUT_MODES=$modes CUT_UNCUT=$uncut \
        CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 CUT_JOBS=gpt2var "$@" timeout 150 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? lib $lib"
    [ "$d" = X ] || cp "$ROOT"/X/cut-gpt2var-naive.json "$ROOT"/X/cut-gpt2var-uncut.json "$ROOT/$d/" 2>/dev/null
    python3 scripts/gpu/cut_steps_report.py "$ROOT/$d" gpt2var | grep -v '^cut75 *[0-9]\|^cut50 *[0-9]'
}
run X naive,planned+offload 1 "$NEW"
run H planned+offload 0 "$OLD"
run X2 planned+offload 0 "$NEW"
run H2 planned+offload 0 "$OLD"
env OUT=$ROOT/gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=gpt2 timeout 200 bash scripts/gpu/cut-bench.sh \
    > "$ROOT/gpt2-bench.log" 2>&1
echo "== gpt2 rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/gpt2-bench.log"
gzip -f "$ROOT"/*.log
