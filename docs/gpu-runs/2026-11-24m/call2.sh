#!/bin/bash
# call 2 (twenty-eighth session): the planner with the kept blocks carried across step variants
# (5c1777a). GPT-2 with the trials and farthest alone (CUT_STEPS=24, planner lines), then the
# standard five-job cut-bench.
R=$OUT; mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/w/c2/$n timeout 280 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c2/$n/x && tar xzf /tmp/w/c2/$n/results.tgz -C /tmp/w/c2/$n/x 2>/dev/null
  cp /tmp/w/c2/$n/x/cut-bench.sh.log /tmp/w/c2/$n.log
  mkdir -p /tmp/w/c2/json-$n; cp /tmp/w/c2/$n/x/cut-bench.sh.out/cut-*.json /tmp/w/c2/json-$n/ 2>/dev/null
}
G="CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 VMEM_LOG_LEVEL=debug"
run trials $G CUT_MODES=planned+offload
run farthest $G CUT_MODES=farthest+offload
run five CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0
tail -45 /tmp/w/c2/five.log
cd /tmp/w && tar czf $R/o.tgz c2/*.log c2/*.outer c2/json-*
