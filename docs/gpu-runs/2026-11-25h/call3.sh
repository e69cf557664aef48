#!/usr/bin/env bash
# Fortieth session, call 3: where a remap's time goes inside BERT's cut steps.
# A throw-away build (remap-unaligned-study.patch plus remap-unaligned-prints.patch)
# with prints (X_DBG: each remap's mapping and
# access times, each device sync, each flush of the old addresses), carried as
# .carry/lib-dbg. BERT, CUT_RECOMPUTE=auto, planned+offload.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25h/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
VMEM_LIBRARY=$PWD/.carry/lib-dbg/libvmem.so.0 X_DBG=1 OUT=$ROOT/dbg CUT_RECOMPUTE=auto CUT_JOBS=bert \
    CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
    timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-dbg.log" 2>&1
echo "== rc=$?"
sed -n '/^job /,/^$/p' "$ROOT/cut-bench-dbg.log"
# each step's XR lines come before its summary line
awk '/^bert planned\+offload cut75/{st=$4; print "-- step " st " done: " substr($0, 1, 60); next} /^bert planned\+offload cut50/{exit} /^XR/ && st>=6 {print}' "$ROOT/cut-bench-dbg.log" | head -120
gzip -f "$ROOT/cut-bench-dbg.log"
