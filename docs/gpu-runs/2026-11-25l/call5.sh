#!/usr/bin/env bash
# Forty-fourth session, call 5: why call 4's second gpt2var process planned 7.32 GB on host for
# the 768-token step 11 of the 50% cut (the first placed none): the defaults (planned + offload)
# twice more with the planner's line per step (VMEM_LOG_LEVEL=debug), no naive or uncut process.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call5.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
for rep in 1 2 3; do
    env OUT=$ROOT/cut$rep VMEM_LOG_LEVEL=debug CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=6 \
        CUT_STEPS=16 CUT_RAISED=2 CUT_JOBS=gpt2var timeout 150 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/cut$rep.log" 2>&1
    echo "== rep $rep rc=$?"
    grep -E "gpt2var planned\+offload cut50" "$ROOT/cut$rep.log" | cut -c1-110
    grep -E "placement: step" "$ROOT/cut$rep.log" | tail -22 | cut -c1-330
done
gzip -f "$ROOT"/*.log
