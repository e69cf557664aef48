#!/usr/bin/env bash
# Forty-fourth session, call 4: call 3 again after 62e45b9 (the cut step's record is not kept as
# a variant), gpt2var with naive and planned+offload and the uncut process, twice (two process
# triples, for the spread); then GPT-2 (steps alike) with planned+offload, its trials.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call4.sh
set -uo pipefail
# (the per-step report ran inline as a Python here-document; it is now
# scripts/gpu/cut_steps_report.py, the same code)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
for rep in 1 2; do
env OUT=$ROOT/cut$rep CUT_MODES=naive,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut$rep-bench.log" 2>&1
echo "== cut-bench $rep rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut$rep-bench.log"
python3 scripts/gpu/cut_steps_report.py "$ROOT/cut$rep" gpt2var
done
env OUT=$ROOT/fixed CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
    CUT_JOBS=gpt2 timeout 150 bash scripts/gpu/cut-bench.sh > "$ROOT/fixed.log" 2>&1
echo "== fixed rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/fixed.log"
python3 scripts/gpu/cut_steps_report.py --rules "$ROOT/fixed"
gzip -f "$ROOT"/*.log
