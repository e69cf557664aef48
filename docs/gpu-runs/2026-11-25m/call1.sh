#!/usr/bin/env bash
# Forty-fifth session, call 1: (1) records three training jobs whose steps differ in shape and
# repeat earlier shapes (scripts/gpu/record_jobs.py gpt2var, bertvar, cnnbuckets) under PyTorch's
# allocator, for the planner's work on this machine; (2) gpt2var of cut_bench.py with HEAD
# (db46700: the loosened trial rule of 3819afb, not run on a GPU before), naive and
# planned+offload and the uncut process, with the planner's line per step.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25m/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
env OUT=$ROOT/rec RECORD_JOBS="gpt2var bertvar cnnbuckets" timeout 280 bash scripts/gpu/record-jobs.sh \
    > "$ROOT/rec.log" 2>&1
echo "== record rc=$?"; tail -12 "$ROOT/rec.log"; tail -5 "$ROOT/rec/record.err" 2>/dev/null
env OUT=$ROOT/cut1 VMEM_LOG_LEVEL=debug CUT_MODES=naive,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 230 bash scripts/gpu/cut-bench.sh > "$ROOT/cut1-bench.log" 2>&1
echo "== cut-bench rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut1-bench.log"
python3 scripts/gpu/cut_steps_report.py "$ROOT/cut1" gpt2var
gzip -f "$ROOT"/*.log
