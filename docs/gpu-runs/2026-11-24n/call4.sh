#!/bin/bash
# call 4 (twenty-ninth session): the trials' abandon rule (12df2e4) with the margin change. The GPU
# test suite without tests/control (the carry of scripts/gpu-run.sh's first test call), GPT-2 with
# the trials in two processes (CUT_STEPS=24, planner lines), then the standard five-job cut-bench.
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c4/tests timeout 200 bash scripts/gpu-run.sh device tests > /tmp/w/c4/tests.outer 2>&1; echo "[tests rc=$?]"
tail -3 /tmp/w/c4/tests.outer
mkdir -p /tmp/w/c4/tests/x && tar xzf /tmp/w/c4/tests/results.tgz -C /tmp/w/c4/tests/x && cp /tmp/w/c4/tests/x/tests.log /tmp/w/c4/tests.log
run() { # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/w/c4/$n timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c4/$n/x && tar xzf /tmp/w/c4/$n/results.tgz -C /tmp/w/c4/$n/x 2>/dev/null
  cp /tmp/w/c4/$n/x/cut-bench.sh.log /tmp/w/c4/$n.log
}
G="CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 VMEM_LOG_LEVEL=debug CUT_MODES=planned+offload"
run trials1 $G
run trials2 $G
run five CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0
tail -45 /tmp/w/c4/five.log
cd /tmp/w && tar czf $R/o.tgz c4/*.log c4/*.outer
