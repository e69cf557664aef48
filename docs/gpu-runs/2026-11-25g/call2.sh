#!/usr/bin/env bash
# Thirty-ninth session, call 2: the arena's mapping work in recomputing cut
# steps. Call 1's recorded BERT trace, replayed on sim-vmm with 64 MiB handles
# (the simulated device has no 512 MiB ones), settles at 75%: no give-back from
# the fifth cut step on. On the H100 every such step gave back memory (one sync,
# 1-3 splits of 512 MiB handles, 13-22 ms of unmapping). VMEM_VMM_HUGE_MIB=512
# (the default) against 0 (64 MiB handles the largest), GPT-2 and BERT, two rounds.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25g/call2.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for round in 1 2; do
  for big in 512 0; do
    OUT=$ROOT/big$big-$round VMEM_VMM_HUGE_MIB=$big CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert \
        CUT_MODES=planned+offload CUT_FULL=5 CUT_RAISED=2 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-big$big-$round.log" 2>&1
    echo "== round $round, VMEM_VMM_HUGE_MIB=$big"
    sed -n '/^job /,/^$/p' "$ROOT/cut-bench-big$big-$round.log"
    awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c)} /the CPU in driver mappings/ && st>=8 {m=$0; sub(/.*driver mappings: /,"",m); sub(/^.*regions \(/,"",r); n[k]++; line[k]=line[k]" | "st": cpu "c" "m}  END{for (k in line) print k line[k]}' "$ROOT/cut-bench-big$big-$round.log" | cut -c1-900
    grep -E 'Traceback|Error' "$ROOT/cut-bench-big$big-$round.log" | head -3
  done
done
gzip -f "$ROOT"/cut-bench-*.log
