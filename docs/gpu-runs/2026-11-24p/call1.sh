#!/usr/bin/env bash
# Thirty-second session, call 1: test_core_placement on the GPU machine (the heavier-step
# test among its cases), then the five jobs' cut bench with the plan's curve counting blocks
# the plan does not know (87b825d).
# Carry: build-gpu/src build-gpu/tests/core build-gpu/carry-libs build-gpu/carry-cuda
# Run from the repository root: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-24p/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LD_LIBRARY_PATH=build-gpu/src:build-gpu/carry-libs:build-gpu/carry-cuda \
    build-gpu/tests/core/test_core_placement --jobs 1 > "$OUT/test_core_placement.log" 2>&1
echo "[test_core_placement rc=$?]"; tail -1 "$OUT/test_core_placement.log"
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh 2>&1 | tee "$OUT/cut-bench.log" | tail -60
