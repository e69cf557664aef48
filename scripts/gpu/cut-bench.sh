#!/usr/bin/env bash
# Issue 11 on a real GPU: training jobs cut to 75% and 50% of their peak,
# naive and planned placement, against the zero-copy and overlap floors.
#   scripts/gpu-run.sh device scripts/gpu/cut-bench.sh
# (framework_proof.sh sets up the library paths; cut_bench.py does the work.)
cd "$(dirname "$0")/../.." || exit 2
VMEM_PROOF_SCRIPT=cut_bench.py exec bash scripts/gpu/framework_proof.sh "$@"
