#!/bin/bash
# call 4: granule handles only (VMEM_VMM_BIG=0: every remap possible, no releases), with copies out by
# the copy engine and by the SMs; GPT-2 and BERT; the default in the same call
mkdir -p /tmp/x/c4
cd "$(dirname "$0")/.."
run() {  # name job env...
  local name=$1 job=$2; shift 2
  env "$@" CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c4/$name timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c4/$name.log 2>&1
  echo "[$name]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/x/c4/$name.log
  tar xzf /tmp/x/c4/$name/results.tgz -O ./cut-bench.sh.log 2>/dev/null | grep -E "cut75 +[6-8] " | sed -E 's/loss.*regions \(/[/; s/held.*the CPU in driver mappings:/ |/'
}
run gpt2-base gpt2
run gpt2-big0 gpt2 VMEM_VMM_BIG=0
run gpt2-big0-sm gpt2 VMEM_VMM_BIG=0 CUT_OFFLOAD_SM_COPY=1
run bert-big0 bert VMEM_VMM_BIG=0
run bert-base bert
tar czf $OUT/o.tgz -C /tmp x
