#!/bin/bash
# call 9: remaps in phase with the tail (VMEM_REMAP_PHASE, on) against off; GPT-2, BERT, alternating; test_vmm remap tests
mkdir -p /tmp/x/c9
cd "$(dirname "$0")/.."
( export LD_LIBRARY_PATH="$PWD/build-gpu/src:$PWD/build-gpu/carry-cuda:$PWD/build-gpu/carry-libs:${LD_LIBRARY_PATH:-}"
  timeout 200 build-gpu/tests/gpu/test_vmm --jobs 1 > /tmp/x/c9/test_vmm.log 2>&1; echo "test_vmm rc=$?"; tail -1 /tmp/x/c9/test_vmm.log )
run() {  # name job env...
  local name=$1 job=$2; shift 2
  env "$@" CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c9/$name timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c9/$name.log 2>&1
  echo "[$name]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/x/c9/$name.log
  tar xzf /tmp/x/c9/$name/results.tgz -O ./cut-bench.sh.log 2>/dev/null | grep -E "cut75 +[6-8] " | sed -E 's/loss.*regions \(/[/; s/held.*the CPU in driver mappings:/ |/'
}
run gpt2-phase1 gpt2
run gpt2-phase0 gpt2 VMEM_REMAP_PHASE=0
run bert-phase1 bert
run bert-phase0 bert VMEM_REMAP_PHASE=0
run gpt2-phase1b gpt2
run bert-phase1b bert
tar czf $OUT/o.tgz -C /tmp x
