#!/usr/bin/env bash
# Thirty-fourth session, call 2 (H200): the five jobs' cut bench with
# CUT_RECOMPUTE=auto as in call 1, then the three deterministic jobs with an
# uncut process each, whose losses the cut run's must equal bitwise.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25b/call2.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/auto CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload \
    CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-auto.log" 2>&1
grep -E "^(job|gpt2|resnet50|bert|vit|convnext) " "$ROOT/cut-bench-auto.log" | head -30
grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-auto.log" | head
OUT=$ROOT/losses CUT_RECOMPUTE=auto CUT_JOBS=resnet50,vit,convnext CUT_MODES=planned+offload \
    CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=3 CUT_UNCUT=1 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-losses.log" 2>&1
grep -E "^(job|resnet50|vit|convnext) " "$ROOT/cut-bench-losses.log" | head -12
gzip -f "$ROOT"/cut-bench-*.log
