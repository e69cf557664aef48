#!/usr/bin/env bash
# Thirty-third session, call 4 (after the `tests` step of the same call): the five jobs' cut
# bench with the futex instance lock (c692587) and the session's other changes.
# Command: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25/call4.sh
# Carry: build-gpu/src build-gpu/tests/core build-gpu/tests/gpu build-gpu/tests/vmm
#        build-gpu/tests/fuzz build-gpu/tests/tags build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh 2>&1 | tee "$OUT/cut-bench.log" | tail -60
