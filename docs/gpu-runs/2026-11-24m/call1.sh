#!/bin/bash
# call 1 (twenty-eighth session): GPT-2 at 50% alternates between 1.65 and 2.26 GB placed on
# host, with device syncs of 72-296 ms. The planner's line per step (VMEM_LOG_LEVEL=debug) and a
# trace (VMEM_TRACE_FILE), with the trials (planned), farthest alone, largest alone.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # name, env...
  local n=$1; shift
  env "$@" CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 OUT=/tmp/w/c1/$n \
    VMEM_LOG_LEVEL=debug VMEM_TRACE_FILE=/tmp/w/c1/$n.trace \
    timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c1/$n/x && tar xzf /tmp/w/c1/$n/results.tgz -C /tmp/w/c1/$n/x 2>/dev/null
  cp /tmp/w/c1/$n/x/cut-bench.sh.log /tmp/w/c1/$n.log
  cp /tmp/w/c1/$n/x/cut-bench.sh.out/cut-*.json /tmp/w/c1/ 2>/dev/null
  gzip -f /tmp/w/c1/$n.trace*
  grep -c 'placement: step' /tmp/w/c1/$n.log /tmp/w/c1/$n.outer
}
run trials CUT_MODES=planned+offload
run farthest CUT_MODES=farthest+offload
run largest CUT_MODES=largest+offload
ls -la /tmp/w/c1
cd /tmp/w && tar czf $R/o.tgz c1/*.log c1/*.outer c1/*.gz c1/*.json
