#!/usr/bin/env bash
# Forty-second session, call 1: what install_torch()'s default recomputation
# does under the program's own gradient checkpointing, and the scripts of
# issues 12 and 13 that now run with the default.
# (1) scripts/gpu/recompute_default.py ckpt-nr ckpt-re: GPT-2 (eager attention)
#     with transformers' gradient checkpointing (non-reentrant, reentrant), 4
#     uncut steps then 6 cut to 50% of the peak in use, with
#     VMEM_TORCH_RECOMPUTE=1 and 0 (losses bitwise equal?), first with the
#     module as it was at 7c532d4 (build-gpu/old-python: nested checkpoints),
#     then with this session's (inside a backward: plain; blocks that leave
#     less than MIN_GAIN in use: not chosen)
# (2) pause_bench.py parts graph, colocate, capture (cuda, vmm): install_torch()
#     with the default, modules run, graphs captured
# (3) scripts/gpu/first-hour.sh (issue 13's first hour)
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25j/call1.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda build-gpu/old-python
#        build-gpu/bench build-gpu/tools
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
cp python/libvmem_recompute.py /tmp/new-recompute.py
cp build-gpu/old-python/libvmem_recompute.py python/libvmem_recompute.py
echo "== (1) old module (7c532d4)"
timeout 200 python3 scripts/gpu/recompute_default.py ckpt-nr ckpt-re 2>&1 | tee "$ROOT/ckpt-old.jsonl" | cut -c1-700
cp /tmp/new-recompute.py python/libvmem_recompute.py
echo "== (1) this session's module"
timeout 200 python3 scripts/gpu/recompute_default.py ckpt-nr ckpt-re 2>&1 | tee "$ROOT/ckpt-new.jsonl" | cut -c1-700
echo "== (2) pause_bench parts"
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
for part in graph colocate; do
    echo "-- $part"; VMEM_BACKEND=vmm PART=$part timeout 60 python3 scripts/gpu/pause_bench.py > "$ROOT/pause-$part.log" 2>&1
    echo "rc=$?"; grep -E '^(RESULT|FAIL|SKIP)' "$ROOT/pause-$part.log" | cut -c1-300
done
for be in cuda vmm; do
    echo "-- capture $be"; VMEM_BACKEND=$be PART=capture timeout 60 python3 scripts/gpu/pause_bench.py > "$ROOT/pause-capture-$be.log" 2>&1
    echo "rc=$?"; grep -E '^(RESULT|FAIL|SKIP)' "$ROOT/pause-capture-$be.log" | cut -c1-300
done
echo "== (3) first hour"
OUT=$ROOT/first-hour timeout 240 bash scripts/gpu/first-hour.sh > "$ROOT/first-hour.log" 2>&1
echo "rc=$?"; tail -25 "$ROOT/first-hour.log"
find "$ROOT/first-hour" -name '*.gz' -size +1M -delete
