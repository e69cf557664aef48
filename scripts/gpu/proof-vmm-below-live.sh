#!/usr/bin/env bash
# Issue 7: with vmm, a limit below the bytes live between steps (weights,
# optimizer state) is honoured by evicting live blocks to host memory at the
# step end; the run continues, and after the raise every byte comes back.
#   scripts/gpu-run.sh device scripts/gpu/proof-vmm-below-live.sh
export VMEM_BACKEND=vmm VMEM_PROOF_CUT_FRACTION=${VMEM_PROOF_CUT_FRACTION:-0.1}
exec bash "$(dirname "$0")/framework_proof.sh" --parts 2 "$@"
