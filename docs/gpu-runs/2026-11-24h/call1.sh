#!/bin/bash
# call 1 (twenty-third session): VMEM_SYNC_FIRST=on against off, GPT-2 and BERT, two
# alternating processes per job and way (off first in round 1, on first in round 2).
# Decision rule, written before the run: `on` stays the default only if, for both jobs, the
# median of the two processes' 75% cut steps (each the median of its last three) is at least
# 3% lower with `on`, and the 50% median at most 3% higher. Otherwise the default goes to off.
mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in ${JOBS:-gpt2 bert}; do
  for r in 1 2; do
    if [ $r = 1 ]; then ways="off on"; else ways="on off"; fi
    for v in $ways; do
      env VMEM_SYNC_FIRST=$v CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/w/c1/$job-$v-$r timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c1/$job-$v-$r.log | head -2
      tar xzOf /tmp/w/c1/$job-$v-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c1/$job-$v-$r-inner.log 2>/dev/null
      grep -E "cut75 +[678] " /tmp/w/c1/$job-$v-$r-inner.log | grep -o "cpu [0-9.]*)\|[0-9]* device syncs, [0-9.]* ms waited, [0-9]* of them\|[0-9]* remaps\|unmap [0-9.]* ms ([^)]*), remap [0-9.]* ms" | paste - - - - | tr '\n' ' '; echo
    done
  done
done
tar czf $OUT/o.tgz -C /tmp w
