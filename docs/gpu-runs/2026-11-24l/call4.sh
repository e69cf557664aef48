#!/bin/bash
# call 4 (twenty-seventh session): review: cut-bench's new after-raise line (the shares of steps
# above 1.05x the full step) printed in a short ResNet-50 run.
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
CUT_JOBS=resnet50 CUT_MODES=planned+offload CUT_FULL=5 CUT_RAISED=4 CUT_UNCUT=0 \
  OUT=/tmp/w/c4/cb timeout 300 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/cb.outer 2>&1
echo "[cut-bench rc=$?]"
mkdir -p /tmp/w/c4/x && tar xzf /tmp/w/c4/cb/results.tgz -C /tmp/w/c4/x 2>/dev/null
cp /tmp/w/c4/x/cut-bench.sh.log /tmp/w/c4/cb.log
sed -n '/^job       mode     rule/,/^$/p' /tmp/w/c4/cb.log
sed -n '/^after each raise/,/^host bytes/p' /tmp/w/c4/cb.log
cd /tmp/w && tar czf $R/o.tgz c4/cb.log
