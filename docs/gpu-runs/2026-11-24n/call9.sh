#!/bin/bash
# call 9 (twenty-ninth session): HostPool.huge in situ. GPT-2 and BERT, the host buffers advised
# huge before they are pinned (CUT_OFFLOAD_HUGE=1) or not, two processes each way, alternating;
# what is compared is each cut's first steps (pinning) and the pack hooks' time in them.
R=$OUT; mkdir -p /tmp/w/c9
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat /sys/kernel/mm/transparent_hugepage/enabled
run() { # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/w/c9/$n timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c9/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c9/$n/x && tar xzf /tmp/w/c9/$n/results.tgz -C /tmp/w/c9/$n/x 2>/dev/null
  cp /tmp/w/c9/$n/x/cut-bench.sh.log /tmp/w/c9/$n.log
  grep -E "over the settled step" /tmp/w/c9/$n.log
}
G="CUT_JOBS=gpt2,bert CUT_FULL=4 CUT_STEPS=4 CUT_RAISED=1 CUT_UNCUT=0 CUT_MODES=planned+offload"
run off1 $G CUT_OFFLOAD_HUGE=0
run huge1 $G CUT_OFFLOAD_HUGE=1
run off2 $G CUT_OFFLOAD_HUGE=0
run huge2 $G CUT_OFFLOAD_HUGE=1
cd /tmp/w && tar czf $R/o.tgz c9/*.log c9/*.outer
