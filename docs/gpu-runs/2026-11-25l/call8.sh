#!/usr/bin/env bash
# Forty-fourth session, call 8: the final library (09c1450: the cut step's record kept as a variant again; variants dropped
# at a limit change; the re-match cap), gpt2var with naive and planned+offload and the uncut process, once
# (one process triple), the planner's line per step (VMEM_LOG_LEVEL=debug).
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call8.sh
set -uo pipefail
# (the per-step report ran inline as a Python here-document; it is now
# scripts/gpu/cut_steps_report.py, the same code)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
for rep in 1; do
env OUT=$ROOT/cut$rep VMEM_LOG_LEVEL=debug CUT_MODES=naive,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut$rep-bench.log" 2>&1
echo "== cut-bench $rep rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut$rep-bench.log"
python3 scripts/gpu/cut_steps_report.py "$ROOT/cut$rep" gpt2var
done
gzip -f "$ROOT"/*.log
