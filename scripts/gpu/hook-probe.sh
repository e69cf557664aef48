#!/usr/bin/env bash
# What the saved tensor offload's hooks cost the CPU, per operation, on a real GPU.
#   scripts/gpu-run.sh device scripts/gpu/hook-probe.sh
cd "$(dirname "$0")/../.." || exit 2
VMEM_PROOF_SCRIPT=hook_probe.py exec bash scripts/gpu/framework_proof.sh "$@"
