#!/usr/bin/env bash
# Thirty-fourth session, call 5 (H200): call 4's commands again, with the
# final offload: a cut that recomputation covers also leaves the first cut
# step's plan (vmem_step_naive).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25b/call5.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
exec bash "$(dirname "$0")/call4.sh"
