#!/bin/bash
# call 3 (twenty-first session): the GPU test binaries and offload-check on 9e8c2a9's C code
# (the review mends of the twentieth session had not run on a GPU) with this session's offload
mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c3/t timeout 500 bash scripts/gpu-run.sh device tests scripts/gpu/offload-check.sh > /tmp/w/c3/tests.log 2>&1
echo "[tests rc=$?]"; tail -12 /tmp/w/c3/tests.log
grep -E "^=== |Synthesis" /tmp/w/c3/t/tests.log | paste - - | awk '{print $2, $6, $7, $8, $9, $10, $11, $12, $13}' | column -t | tail -45
tar czf $OUT/o.tgz -C /tmp w
