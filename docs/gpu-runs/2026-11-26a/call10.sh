#!/usr/bin/env bash
# Forty-sixth session, call 10: gpt2var with the offload's budget per step shape
# (CUT_OFFLOAD_BY_SHAPE=1, measured and left off in the forty-fifth session: at 75% the
# 1024-token shape kept the budget learned in the cut's first step, before recomputation had
# started; recomputation now starts in that step) against the default (one budget) and naive,
# the final tree. X: naive, planned+offload, uncut; S, D, S2: by_shape, default, by_shape.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call10.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() {  # DIR MODES UNCUT BY_SHAPE
    local d=$1 modes=$2 uncut=$3 bs=$4
    env OUT=$ROOT/$d CUT_MODES=$modes CUT_UNCUT=$uncut CUT_JOBS=gpt2var CUT_OFFLOAD_BY_SHAPE=$bs \
        CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 timeout 150 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? by_shape $bs"
    [ "$d" = X ] || cp "$ROOT"/X/cut-gpt2var-naive.json "$ROOT"/X/cut-gpt2var-uncut.json "$ROOT/$d/" 2>/dev/null
    python3 scripts/gpu/cut_steps_report.py "$ROOT/$d" gpt2var | grep -v '^cut75 *[0-9]\|^cut50 *[0-9]'
}
run X naive,planned+offload 1 0
run S planned+offload 0 1
run D planned+offload 0 0
run S2 planned+offload 0 1
gzip -f "$ROOT"/*.log
