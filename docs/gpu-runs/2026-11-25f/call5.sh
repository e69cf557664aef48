#!/usr/bin/env bash
# Thirty-eighth session, call 5: call 3 (the five jobs, this session's
# library) three more times on the same machine, to read the spread of the
# cut step over the full step from run to run (call 4 read GPT-2 at 75% at
# 1.14 and 1.55 in two runs of one library).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call5.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for round in 1 2 3; do
  OUT=$ROOT/r$round CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload \
      CUT_FULL=8 CUT_RAISED=3 CUT_UNCUT=0 \
      bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-r$round.log" 2>&1
  echo "== round $round"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-r$round.log"
done
gzip -f "$ROOT"/cut-bench-*.log
