#!/usr/bin/env bash
# Thirty-fourth session, call 5 (H200): the offload's first budget under a cut
# starts from the demand less what recomputation will take off (relief), the
# five jobs as in call 1; and a cut that recomputation covers leaves the step's plan (vmem_step_naive) too.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25b/call5.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 scripts/gpu/recompute_check.py > "$OUT/recompute-check.log" 2>&1; tail -1 "$OUT/recompute-check.log"
ROOT=$OUT
OUT=$ROOT/auto CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload \
    CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-auto.log" 2>&1
sed -n '/^job /,/^phases/p' "$ROOT/cut-bench-auto.log"
sed -n '/^what a cut costs once/,/^after each/p' "$ROOT/cut-bench-auto.log" | cut -c1-200
grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-auto.log" | head
gzip -f "$ROOT"/cut-bench-*.log
