#!/usr/bin/env bash
# Forty-fourth session, call 3: call 2 again after 5af217e (the rule trials end at a step unlike
# the one before; the offload keeps its pinned buffers through light steps under the same limit
# and reuses larger ones), gpt2var with naive and planned+offload and the uncut process; then
# GPT-2, ResNet-50 and BERT (steps alike) with planned+offload, to see that their trials still
# run (the rule of every cut step) and end where they did.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call3.sh
set -uo pipefail
# (the per-step report ran inline as a Python here-document; it is now
# scripts/gpu/cut_steps_report.py, the same code)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
env OUT=$ROOT/cut CUT_MODES=naive,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 260 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench.log" 2>&1
echo "== cut-bench rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench.log"
python3 scripts/gpu/cut_steps_report.py "$ROOT/cut" gpt2var
env OUT=$ROOT/fixed CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
    CUT_JOBS=gpt2,resnet50,bert timeout 280 bash scripts/gpu/cut-bench.sh > "$ROOT/fixed.log" 2>&1
echo "== fixed rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/fixed.log"
python3 scripts/gpu/cut_steps_report.py --rules "$ROOT/fixed"
gzip -f "$ROOT"/*.log
