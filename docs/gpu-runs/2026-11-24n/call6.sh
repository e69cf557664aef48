#!/bin/bash
# call 6 (twenty-ninth session): the trials judged by the mean of their counted steps (8e05e1d).
# test_core_placement on the GPU machine, GPT-2 with the trials in three processes (CUT_STEPS=24,
# planner lines), then the standard five-job cut-bench.
R=$OUT; mkdir -p /tmp/w/c6
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LD_LIBRARY_PATH=build-gpu/src:build-gpu/carry-libs:build-gpu/carry-cuda build-gpu/tests/core/test_core_placement --jobs 1 > /tmp/w/c6/test_core_placement.log 2>&1
echo "[test_core_placement rc=$?]"; tail -1 /tmp/w/c6/test_core_placement.log
run() { # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/w/c6/$n timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c6/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c6/$n/x && tar xzf /tmp/w/c6/$n/results.tgz -C /tmp/w/c6/$n/x 2>/dev/null
  cp /tmp/w/c6/$n/x/cut-bench.sh.log /tmp/w/c6/$n.log
}
G="CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 VMEM_LOG_LEVEL=debug CUT_MODES=planned+offload"
run trials1 $G
run trials2 $G
run trials3 $G
run five CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0
tail -45 /tmp/w/c6/five.log
cd /tmp/w && tar czf $R/o.tgz c6/*.log c6/*.outer
