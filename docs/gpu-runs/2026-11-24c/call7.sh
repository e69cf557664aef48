#!/bin/bash
# call 5: BERT, granule handles only (VMEM_VMM_BIG=0) against the default, alternating, twice each
# the copy engine and by the SMs; GPT-2 and BERT; the default in the same call
mkdir -p /tmp/x/c5
cd "$(dirname "$0")/.."
run() {  # name job env...
  local name=$1 job=$2; shift 2
  env "$@" CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c5/$name timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c5/$name.log 2>&1
  echo "[$name]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/x/c5/$name.log
  tar xzf /tmp/x/c5/$name/results.tgz -O ./cut-bench.sh.log 2>/dev/null | grep -E "cut75 +[6-8] " | sed -E 's/loss.*regions \(/[/; s/held.*the CPU in driver mappings:/ |/'
}
run bert-base1 bert
run bert-big0-1 bert VMEM_VMM_BIG=0
run bert-base2 bert
run bert-big0-2 bert VMEM_VMM_BIG=0
tar czf $OUT/o.tgz -C /tmp x
