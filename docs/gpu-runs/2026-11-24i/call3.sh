#!/bin/bash
# call 3 (twenty-fourth session): the hooks' CPU cost with the fast path, then ResNet-50 and GPT-2
# cut with the final offload (a check that the cut steps are as before, not a decision).
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c3/hc timeout 120 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh hook-cost > /tmp/w/c3/hc.log 2>&1
echo "[hook-cost rc=$?]"
tar xzOf /tmp/w/c3/hc/results.tgz ./offload-autograd.sh.log 2>/dev/null | grep 'hook cost'
CUT_JOBS=resnet50,gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=2 \
  OUT=/tmp/w/c3/cb timeout 400 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/cb.log 2>&1
echo "[cut-bench rc=$?]"
tar xzOf /tmp/w/c3/cb/results.tgz ./cut-bench.sh.log > /tmp/w/c3/cb-inner.log 2>/dev/null
grep -E '^\|' /tmp/w/c3/cb-inner.log | tail -20
cd /tmp/w && tar czf $R/o.tgz c3
