#!/bin/bash
# call 5 (twenty-seventh session, review): release_probe.py after its two release-then-steps
# ways became one loop (behaviour unchanged).
R=$OUT; mkdir -p /tmp/w/c5
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 scripts/gpu/release_probe.py 2 32 2>&1 | grep -v Warning | tee /tmp/w/c5/release-probe.log
echo "[release_probe rc=${PIPESTATUS[0]}]"
cd /tmp/w && tar czf $R/o.tgz c5/release-probe.log
