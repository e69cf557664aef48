#!/usr/bin/env bash
# Thirty-eighth session, call 7: call 6 over longer cuts: GPT-2 and BERT,
# 60 steps per cut (CUT_STEPS=60), VMEM_TORCH_GC_FREEZE=0 and 1, one round:
# how often the full collection comes back without the freeze, and the mean
# cut step with and without.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call7.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for fz in 0 1; do
  OUT=$ROOT/fz$fz VMEM_TORCH_GC_FREEZE=$fz CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert \
      CUT_MODES=planned+offload CUT_FULL=8 CUT_STEPS=60 CUT_RAISED=3 CUT_UNCUT=0 \
      bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-fz$fz.log" 2>&1
  echo "== VMEM_TORCH_GC_FREEZE=$fz"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-fz$fz.log"
  awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; n[k]++; if ($4>0) {s[k]+=$5; m[k]++}} /garbage collector/{match($0,/collector [0-9]+ runs, [0-9.]+ ms/); split(substr($0,RSTART,RLENGTH),a," "); g[k]+=a[4]; if (a[4]>50) big[k]=big[k]" step"(n[k]-1)":"a[4]} END{for (k in n) printf "%s: %d steps, mean from step 1 %.1f ms; GC %.1f ms in all; collections over 50 ms:%s\n", k, n[k], s[k]/m[k], g[k], big[k]}' "$ROOT/cut-bench-fz$fz.log"
done
gzip -f "$ROOT"/cut-bench-*.log
