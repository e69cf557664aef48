#!/usr/bin/env bash
# Forty-fifth session, call 2: the offload's budget per step shape (by_shape, new) on gpt2var.
# A: naive, planned+offload (by_shape on) and the uncut process; B: planned+offload with
# CUT_OFFLOAD_BY_SHAPE=0 (one budget, the way before); A' and B' again (planned+offload only);
# then T: planned+offload (by_shape on) once more with VMEM_TRACE_FILE, the allocations libvmem
# saw (the offload's and recomputation's included), for the planner's work on a CPU.
# Each B or A' directory gets A's naive and uncut JSON for the per-step report.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25m/call2.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
run() {  # DIR MODES UNCUT BY_SHAPE [env...]
    local d=$1 modes=$2 uncut=$3 bs=$4; shift 4
    env OUT=$ROOT/$d VMEM_LOG_LEVEL=debug CUT_MODES=$modes CUT_UNCUT=$uncut CUT_OFFLOAD_BY_SHAPE=$bs \
        CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 CUT_JOBS=gpt2var "$@" timeout 150 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$?"
    [ "$d" = A ] || cp "$ROOT"/A/cut-gpt2var-naive.json "$ROOT"/A/cut-gpt2var-uncut.json "$ROOT/$d/" 2>/dev/null
    python3 scripts/gpu/cut_steps_report.py "$ROOT/$d" gpt2var | grep -v '^cut75 *[0-9]\|^cut50 *[0-9]'
}
run A naive,planned+offload 1 1
run B planned+offload 0 0
run A2 planned+offload 0 1
run B2 planned+offload 0 0
run T planned+offload 0 1 VMEM_TRACE_FILE=$ROOT/trace_gpt2var_offload.txt
gzip -f "$ROOT"/*.log "$ROOT"/*.txt 2>/dev/null
ls -la "$ROOT"
