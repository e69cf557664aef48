#!/usr/bin/env bash
# Issue 7's rerun of the framework proof with the vmm backend (pointer-stable
# spill, migration back at the step end): parts 2 (the cut) and 6 (two GPUs).
#   scripts/gpu-run.sh device scripts/gpu/proof-vmm.sh
export VMEM_BACKEND=vmm
exec bash "$(dirname "$0")/framework_proof.sh" --parts "${PARTS:-2,6}" "$@"
