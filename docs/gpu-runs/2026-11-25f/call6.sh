#!/usr/bin/env bash
# Thirty-eighth session, call 6: Python's collector while blocks recompute.
# GPT-2 and BERT cut to 75% and 50% (CUT_RECOMPUTE=auto, planned+offload),
# VMEM_TORCH_GC_FREEZE=0 (the collector left alone, as before) and 1 (collect
# and gc.freeze() once when blocks first recompute) in turn, two rounds.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call6.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for round in 1 2; do
  for fz in 0 1; do
    OUT=$ROOT/fz$fz-$round VMEM_TORCH_GC_FREEZE=$fz CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert \
        CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=3 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-fz$fz-$round.log" 2>&1
    echo "== round $round, VMEM_TORCH_GC_FREEZE=$fz"
    sed -n '/^job /,/^$/p' "$ROOT/cut-bench-fz$fz-$round.log"
    zcat -f "$ROOT/cut-bench-fz$fz-$round.log" | awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; t[k]=t[k]" "$5} /garbage collector/{match($0,/collector [0-9]+ runs, [0-9.]+ ms/); split(substr($0,RSTART,RLENGTH),a," "); g[k]+=a[4]} END{for (k in t) printf "%s steps:%s; GC %.1f ms in all\n", k, t[k], g[k]}'
    grep -o 'gc_settle_ms[^,}]*\|gc_frozen[^,}]*' "$ROOT/cut-bench-fz$fz-$round.log" | sort | uniq -c | head -4
  done
done
gzip -f "$ROOT"/cut-bench-*.log
