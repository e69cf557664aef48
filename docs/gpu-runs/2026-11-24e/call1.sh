#!/bin/bash
# call 1 (twentieth session): the GPU test binaries and offload-check on 9c6593e (ab8da06's step
# end and the review mends had not run on a GPU), then a recorded GPT-2 and BERT cut run at 75%
# for the arena's moves (VMEM_TRACE_FILE), with the remap statistics per step
mkdir -p /tmp/v/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/v/c1/t timeout 420 bash scripts/gpu-run.sh device tests scripts/gpu/offload-check.sh > /tmp/v/c1/tests.log 2>&1
echo "[tests rc=$?]"; tail -12 /tmp/v/c1/tests.log
grep -E "^=== |Synthesis" /tmp/v/c1/t/tests.log | paste - - | awk '{print $2, $6, $7, $8, $9, $10, $11, $12, $13}' | column -t | tail -45
tar czf $OUT/o.tgz -C /tmp v
