#!/bin/bash
# call 12 (twenty-fifth session): GPT-2 compiled whole, profiled with the CPU's activity
# (CUT_PROFILE=cpu: the last full step too), to tell host reads from kernel choice.
R=$OUT; mkdir -p /tmp/w/c12
cd "$(dirname "$0")/.."
CUT_PROFILE=cpu CUT_COMPILE=1 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=7 CUT_RAISED=1 \
  OUT=/tmp/w/c12/cb timeout 300 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c12/cb.log 2>&1
echo "[rc=$?]"
tar xzOf /tmp/w/c12/cb/results.tgz ./cut-bench.sh.log > /tmp/w/c12/cb-inner.log 2>/dev/null
rm -f /tmp/w/c12/cb/results.tgz
grep -A14 '^profile gpt2' /tmp/w/c12/cb-inner.log | cut -c1-90,150-200 | head -60
find /tmp/w/c12 -name 'trace-*.json' -delete
cd /tmp/w && tar czf $R/o.tgz c12
