#!/usr/bin/env bash
# Forty-third session, call 4: the GPU paths with the inlined helpers (0b8683f), as a check
# that nothing else moved (the decisions are the same by construction, read on sim): the
# defaults' cut on GPT-2 and ResNet-50 (two steps after each raise), and pause_bench's parts
# graph, colocate and capture (cuda, vmm) under install_torch().
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25k/call4.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
env OUT=$ROOT/cut CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 \
    CUT_JOBS=gpt2,resnet50 CUT_RAISED=2 timeout 240 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench.log" 2>&1
echo "== cut-bench rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench.log"
grep -E 'median from the second' "$ROOT/cut-bench.log" | cut -c1-200
for part in graph colocate; do
    echo "-- $part"; VMEM_BACKEND=vmm PART=$part timeout 60 python3 scripts/gpu/pause_bench.py > "$ROOT/pause-$part.log" 2>&1
    echo "rc=$?"; grep -E '^(RESULT|FAIL|SKIP)' "$ROOT/pause-$part.log" | cut -c1-300
done
for be in cuda vmm; do
    echo "-- capture $be"; VMEM_BACKEND=$be PART=capture timeout 60 python3 scripts/gpu/pause_bench.py > "$ROOT/pause-capture-$be.log" 2>&1
    echo "rc=$?"; grep -E '^(RESULT|FAIL|SKIP)' "$ROOT/pause-capture-$be.log" | cut -c1-300
done
gzip -f "$ROOT"/*.log
