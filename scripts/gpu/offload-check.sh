#!/usr/bin/env bash
# The saved tensor offload (python/libvmem_offload.py) on a real GPU: same
# losses and gradients with and without it under a cut, bytes fetched ahead.
#   scripts/gpu-run.sh device scripts/gpu/offload-check.sh
cd "$(dirname "$0")/../.." || exit 2
VMEM_PROOF_SCRIPT=offload_check.py exec bash scripts/gpu/framework_proof.sh "$@"
