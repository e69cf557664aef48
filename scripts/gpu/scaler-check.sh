#!/usr/bin/env bash
# The step hook under a GradScaler that skips steps, on a real GPU.
#   scripts/gpu-run.sh device scripts/gpu/scaler-check.sh
cd "$(dirname "$0")/../.." || exit 2
VMEM_PROOF_SCRIPT=scaler_check.py exec bash scripts/gpu/framework_proof.sh "$@"
