#!/usr/bin/env bash
# Forty-sixth session, call 9: the final tree (its python/; the library unchanged), cuts between
# steps: gpt2var (naive, planned+offload and the uncut process) and BERT (planned+offload).
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call9.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
env OUT=$ROOT/X CUT_MODES=naive,planned+offload CUT_UNCUT=1 CUT_JOBS=gpt2var \
    CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/X-bench.log" 2>&1
echo "== X rc=$?"
python3 scripts/gpu/cut_steps_report.py "$ROOT/X" gpt2var | grep -v '^cut75 *[0-9]\|^cut50 *[0-9]'
env OUT=$ROOT/B CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=bert CUT_FULL=5 CUT_STEPS=8 \
    CUT_RAISED=2 timeout 140 bash scripts/gpu/cut-bench.sh > "$ROOT/B-bench.log" 2>&1
echo "== B rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/B-bench.log"
gzip -f "$ROOT"/*.log
