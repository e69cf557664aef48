#!/bin/bash
# call 13: the budget when no saved tensor is eligible (EfficientNet-B0 with CUT_OFFLOAD_DENSE=0):
# capped at 0 by a step that looked, no longer growing at every step
cd "$(dirname "$0")/.."
CUT_OFFLOAD_DENSE=0 CUT_JOBS=effnet CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
  OUT=/tmp/e13 timeout 150 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/e13.log 2>&1
echo "[rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/e13.log | head -2
mkdir -p /tmp/e13x && tar xzf /tmp/e13/results.tgz -C /tmp/e13x && grep -o "budget [0-9.]* -> [0-9.]* GB" /tmp/e13x/cut-bench.sh.log | tr '\n' ';'
