#!/usr/bin/env bash
# Forty-first session, call 6: GPT-2's cut with the defaults once more, after
# the change that keeps a cut step whose calls ran plain (a key/value cache
# argument) from teaching the step's need (call 5 learned 14.94 GB from such a
# step instead of 13.59, and chose 11 blocks at 75% instead of 9).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call6.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/gpt2 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 \
    CUT_RAISED=2 timeout 150 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-gpt2.log" 2>&1
echo "== gpt2 rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench-gpt2.log"
grep -E 'recompute: ' "$ROOT/cut-bench-gpt2.log" | sed -n '6p;8p;22p;24p' | cut -c1-200
gzip -f "$ROOT"/*.log
