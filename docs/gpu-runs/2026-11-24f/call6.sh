#!/bin/bash
# call 6 (twenty-first session): the GPU test binaries and offload-check on the final code (the budget kept by a step
# that could offload nothing, the control file's error state published with its count)
mkdir -p /tmp/w/c6
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c6/t timeout 520 bash scripts/gpu-run.sh device tests scripts/gpu/offload-check.sh > /tmp/w/c6/oc.log 2>&1
echo "[offload-check rc=$?]"; tail -8 /tmp/w/c6/oc.log
tar czf $OUT/o.tgz -C /tmp w
