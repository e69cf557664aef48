#!/bin/bash
# call 9 (twenty-first session), the other side of call 8: a larger budget margin (5% of the
# limit instead of 3%) for GPT-2 and BERT, whose 75% cut steps make 8-18 remaps and one device
# synchronisation a step (30-70 ms of CPU in mapping calls). Call 8 found that a smaller margin
# made ResNet-50's arena move memory; does a larger one stop GPT-2's and BERT's moves, and is
# that worth the bytes it adds? Two alternating processes per job and way. Exploratory: no
# default changes on this call alone; a lead needs at least 5% at 75% for both jobs with the
# 50% medians at most 3% higher.
mkdir -p /tmp/w/c9
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in ${JOBS:-gpt2 bert}; do
  for r in 1 2; do
    for v in def m5; do
      case $v in def) e="CUT_ALT=budget.margin_frac=0.03";; m5) e="CUT_ALT=budget.margin_frac=0.05";; esac
      env $e CUT_ALT_FROM=0 CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/w/c9/$job-$v-$r timeout 90 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c9/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c9/$job-$v-$r.log | head -2
      tar xzOf /tmp/w/c9/$job-$v-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c9/$job-$v-$r-inner.log 2>/dev/null
      grep -E "cut75 +[678] " /tmp/w/c9/$job-$v-$r-inner.log | grep -o "cpu [0-9.]*)\|[0-9]* device syncs\|[0-9]* remaps\|unmap [0-9.]* ms, remap [0-9.]* ms" | paste - - - - | tr '\n' ' '; echo
      grep -A1 -E "cut75 +8 " /tmp/w/c9/$job-$v-$r-inner.log | grep -o "[0-9.]* GB out\|budget [0-9.]* -> [0-9.]* GB; device max [0-9.]* GB" | tr '\n' ' '; echo
    done
  done
done
tar czf $OUT/o.tgz -C /tmp w
