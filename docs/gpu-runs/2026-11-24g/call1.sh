#!/bin/bash
# call 1 (twenty-second session): do the 512 MiB (huge) handles cause GPT-2's and BERT's
# per-step mapping CPU under a 75% cut? Default (huge 512 MiB) against VMEM_VMM_HUGE_MIB=0,
# two alternating processes per job and way; the step line now prints huge and big splits
# and the CPU in huge splits. Exploratory: a lead needs the 75% cut step at least 5% lower
# for both jobs (median of the two processes' medians) with the 50% step at most 3% higher.
mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in ${JOBS:-gpt2 bert}; do
  for r in 1 2; do
    for v in def h0; do
      case $v in def) e="VMEM_VMM_HUGE_MIB=512";; h0) e="VMEM_VMM_HUGE_MIB=0";; esac
      env $e CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/w/c1/$job-$v-$r timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c1/$job-$v-$r.log | head -2
      tar xzOf /tmp/w/c1/$job-$v-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c1/$job-$v-$r-inner.log 2>/dev/null
      grep -E "cut75 +[678] " /tmp/w/c1/$job-$v-$r-inner.log | grep -o "cpu [0-9.]*)\|[0-9]* device syncs\|[0-9]* remaps\|unmap [0-9.]* ms ([^)]*), remap [0-9.]* ms" | paste - - - - | tr '\n' ' '; echo
    done
  done
done
tar czf $OUT/o.tgz -C /tmp w
