#!/usr/bin/env bash
# Thirty-eighth session, call 3: the five jobs' cut benchmark with the final
# library (the placement change of 806a503 included), as the thirty-fourth
# session's call 4/5: CUT_RECOMPUTE=auto, planned+offload.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/auto CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload \
    CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-auto.log" 2>&1
sed -n '/^job /,/^phases/p' "$ROOT/cut-bench-auto.log"
sed -n '/^what a cut costs once/,/^after each/p' "$ROOT/cut-bench-auto.log" | cut -c1-200
grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-auto.log" | head
gzip -f "$ROOT"/cut-bench-*.log
