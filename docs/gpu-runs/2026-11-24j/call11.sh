#!/bin/bash
# call 11 (twenty-fifth session, review): cut_bench after alternate() took the phase name:
# ResNet-50, hooks_always alternated in the full steps.
R=$OUT; mkdir -p /tmp/w/c11
cd "$(dirname "$0")/.."
CUT_JOBS=resnet50 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=7 CUT_STEPS=4 CUT_RAISED=1 \
  CUT_ALT=hooks_always=0,1 CUT_ALT_PHASES=full CUT_ALT_FROM=1 OUT=/tmp/w/c11/cb timeout 120 \
  bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c11/cb.log 2>&1
echo "[rc=$?]"
tar xzOf /tmp/w/c11/cb/results.tgz ./cut-bench.sh.log > /tmp/w/c11/cb-inner.log 2>/dev/null
grep -E '^alternate|^resnet50 +planned\+offload +(cut75|cut50) ' /tmp/w/c11/cb-inner.log | cut -c1-120
cd /tmp/w && tar czf $R/o.tgz c11
