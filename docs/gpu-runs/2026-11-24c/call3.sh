#!/bin/bash
# call 2: copies out by the SMs on a high-priority stream; kernel blocks 32, 8, 96; GPT-2 and BERT
mkdir -p /tmp/x/c2
cd "$(dirname "$0")/.."
run() {  # name job env...
  local name=$1 job=$2; shift 2
  env "$@" CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c2/$name timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c2/$name.log 2>&1
  echo "[$name]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/x/c2/$name.log
  tar xzf /tmp/x/c2/$name/results.tgz -O ./cut-bench.sh.log 2>/dev/null | grep -E "cut75 +[6-8] " | sed -E 's/loss.*regions \(/[/; s/held.*the CPU in driver mappings:/ |/'
}
run gpt2-prio32 gpt2 CUT_OFFLOAD_OUT_PRIORITY=1
run gpt2-prio8 gpt2 CUT_OFFLOAD_OUT_PRIORITY=1 VMEM_COPY_BLOCKS=8
run gpt2-sm0prio gpt2 CUT_OFFLOAD_OUT_PRIORITY=1 CUT_OFFLOAD_SM_COPY=0
run bert-prio32 bert CUT_OFFLOAD_OUT_PRIORITY=1
tar czf $OUT/o.tgz -C /tmp x
