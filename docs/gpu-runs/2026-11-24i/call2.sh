#!/bin/bash
# call 2 (twenty-fourth session): the offload against autograd's less common paths, after the
# fixes (a reclaimed tensor held until its copy out is done; the in-place check), the hooks'
# CPU cost, then offload-check.
R=$OUT; mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c2/run timeout 420 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c2/outer.log 2>&1
echo "[rc=$?]"
tar xzOf /tmp/w/c2/run/results.tgz ./offload-autograd.sh.log > /tmp/w/c2/inner.log 2>/dev/null
grep -E '^(hook cost|[a-z_]+: |\||offload-autograd)' /tmp/w/c2/inner.log | tail -40
OUT=/tmp/w/c2/chk timeout 160 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c2/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c2/chk/results.tgz ./offload-check.sh.log 2>/dev/null | grep -E 'PASS|FAIL' | tail -12
cd /tmp/w && tar czf $R/o.tgz c2
