#!/usr/bin/env bash
# Thirty-eighth session, call 9: more headroom for the arena under a cut.
# Recomputation covers the deficit plus the largest block's gain plus a
# margin of 5% of the limit; a throw-away knob (VMEM_X_RECOMPUTE_MARGIN, the
# study patch recompute-margin-study.patch) sets that margin to 0.10 and 0.15,
# so one or two more blocks recompute and the arena's working set has more
# room: fewer give-backs and remaps a step? GPT-2 and BERT, two rounds.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call9.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for round in 1 2; do
  for m in 0.05 0.10 0.15; do
    OUT=$ROOT/m$m-$round VMEM_X_RECOMPUTE_MARGIN=$m CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert \
        CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=2 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-m$m-$round.log" 2>&1
    echo "== round $round, margin $m"
    sed -n '/^job /,/^$/p' "$ROOT/cut-bench-m$m-$round.log"
    awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c)} /recompute: / && st>=12 {r=$0; sub(/.*chosen /,"chosen ",r); sub(/, deficit.*/,"",r); ch[k]=r} /the CPU in driver mappings/ && st>=10 && st<=12 {m=$0; sub(/.*driver mappings: /,"",m); line[k]=line[k]" | "st": cpu "c" "m} END{for (k in line) print k, ch[k] line[k]}' "$ROOT/cut-bench-m$m-$round.log" | cut -c1-520
  done
done
gzip -f "$ROOT"/cut-bench-*.log
