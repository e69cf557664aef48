#!/usr/bin/env bash
# Forty-seventh session, call 2: the offload's budget told when the arena gave memory back
# (Budget.step_end(moved=): from the third step end under a limit, each such step widens the
# margin by 3% of the limit, at most 12%, and raises the budget to the lowered target), against
# the same adapters with it off (CUT_OFFLOAD_MOVES=0). One library, one process per run, in turn.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26b/call2.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() {  # NAME JOB MOVES
    env OUT=$ROOT/$1 CUT_OFFLOAD_MOVES=$3 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=$2 \
        CUT_FULL=5 CUT_STEPS=16 CUT_RAISED=2 timeout 170 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$1-bench.log" 2>&1
    echo "== $1 rc=$? moves=$3"
    sed -n '/^job /,/^$/p' "$ROOT/$1-bench.log"
}
run B1on bert 1
run B1off bert 0
run G1on gpt2 1
run G1off gpt2 0
run B2off bert 0
run B2on bert 1
run R1on resnet50 1
run R1off resnet50 0
gzip -f "$ROOT"/*.log
