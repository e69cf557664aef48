#!/usr/bin/env bash
# Thirty-first session, call 1: the five jobs' cut bench after the plan's
# load curve (a step that skips blocks of its plan keeps their room).
# Run from the repository root: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-24o/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh 2>&1 | tee "$OUT/cut-bench.log"
