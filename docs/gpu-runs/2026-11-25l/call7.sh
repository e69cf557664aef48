#!/usr/bin/env bash
# Forty-fourth session, call 7: call 4 again (gpt2var with naive, planned + offload and the uncut
# process, twice; then GPT-2's trials) after a step re-matching more than 32 times goes naive,
# with the planner's line per step (VMEM_LOG_LEVEL=debug). It ran as a copy of call4.sh with
# VMEM_LOG_LEVEL=debug on the gpt2var runs only; here the GPT-2 run gets it too.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call7.sh
export VMEM_LOG_LEVEL=debug
exec bash "$(dirname "$0")/call4.sh"
