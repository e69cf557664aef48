#!/bin/bash
# call 12: the GPU test binaries on the final C code (7a21da4: tags reclaim waiting blocks at a
# resume and the step end too)
cd "$(dirname "$0")/.."
OUT=/tmp/t12 timeout 400 bash scripts/gpu-run.sh device tests > /tmp/t12.log 2>&1
echo "[tests rc=$?]"; grep -E "^=== |Synthesis" /tmp/t12/tests.log | paste - - | awk '{print $2, $6, $7, $8, $9, $10, $11, $12, $13}' | column -t | tail -45; tail -3 /tmp/t12.log
