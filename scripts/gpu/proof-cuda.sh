#!/usr/bin/env bash
# Issue 5's framework proof on the cudaMalloc + pinned-host route (the route for
# machines and drivers without VMM): the same script with VMEM_BACKEND=cuda.
#   scripts/gpu-run.sh device scripts/gpu/proof-cuda.sh
export VMEM_BACKEND=cuda
exec bash "$(dirname "$0")/framework_proof.sh" "$@"
