#!/usr/bin/env bash
# The saved tensor offload against autograd's less common paths
# (checkpointing, retain_graph, double backward, cuDNN LSTM, torch.compile,
# custom Functions, dropped graphs, in-place changes): the same results with
# and without it under a cut.
#   scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh
cd "$(dirname "$0")/../.." || exit 2
VMEM_PROOF_SCRIPT=offload_autograd.py exec bash scripts/gpu/framework_proof.sh "$@"
