#!/usr/bin/env bash
# Thirty-ninth session, call 1: GPT-2's and BERT's cut runs with the defaults the
# benchmark reports (CUT_RECOMPUTE=auto, planned+offload), recorded by libvmem
# (VMEM_TRACE_FILE), so that the arena's moves in the recomputing cut steps can be
# replayed without a GPU (bench/replay_recorded.py).  The traces of 2026-11-24c
# predate recomputation.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25g/call1.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for job in bert gpt2; do
  VMEM_TRACE_FILE=$ROOT/trace_cutrc_$job.txt OUT=$ROOT/$job CUT_RECOMPUTE=auto CUT_JOBS=$job \
      CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
      timeout 240 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$job.log" 2>&1
  echo "[$job rc=$?]"
  sed -n '/^job /,/^phases/p' "$ROOT/cut-bench-$job.log" | head -20
  grep -E "Error|Traceback" "$ROOT/cut-bench-$job.log" | head -5
  gzip -f "$ROOT"/trace_cutrc_$job.txt "$ROOT/cut-bench-$job.log"
done
ls -la $ROOT
