#!/bin/bash
# call 1 (twenty-ninth session): the learned margin grows by what a fallback lacked (9801910 +
# f9cb332). GPT-2 with the trials (CUT_STEPS=24, planner lines), then the standard five-job
# cut-bench.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/w/c1/$n timeout 280 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c1/$n/x && tar xzf /tmp/w/c1/$n/results.tgz -C /tmp/w/c1/$n/x 2>/dev/null
  cp /tmp/w/c1/$n/x/cut-bench.sh.log /tmp/w/c1/$n.log
}
run trials CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 VMEM_LOG_LEVEL=debug CUT_MODES=planned+offload
run five CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0
tail -45 /tmp/w/c1/five.log
cd /tmp/w && tar czf $R/o.tgz c1/*.log c1/*.outer
