#!/usr/bin/env bash
# Thirty-eighth session, call 8: the arena's mapping work in recomputing cut
# steps. With recomputation BERT's and GPT-2's 75% steps are CPU-bound, and
# the arena spends 15-22 ms of CPU a step in mapping calls (give-backs that
# split 64/512 MiB handles, remaps refused on them). VMEM_VMM_BIG=1 (the
# default) against 0 (2 MiB handles only: every remap possible, no splits),
# GPT-2 and BERT, two rounds.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call8.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for round in 1 2; do
  for big in 1 0; do
    OUT=$ROOT/big$big-$round VMEM_VMM_BIG=$big CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert \
        CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=3 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-big$big-$round.log" 2>&1
    echo "== round $round, VMEM_VMM_BIG=$big"
    sed -n '/^job /,/^$/p' "$ROOT/cut-bench-big$big-$round.log"
    awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c)} /the CPU in driver mappings/ && st>=8 {m=$0; sub(/.*driver mappings: /,"",m); sub(/^.*regions \(/,"",r); n[k]++; line[k]=line[k]" | "st": cpu "c" "m}  END{for (k in line) print k line[k]}' "$ROOT/cut-bench-big$big-$round.log" | cut -c1-900
    grep -E 'Traceback|Error' "$ROOT/cut-bench-big$big-$round.log" | head -3
  done
done
gzip -f "$ROOT"/cut-bench-*.log
