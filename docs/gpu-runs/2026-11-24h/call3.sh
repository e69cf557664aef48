#!/bin/bash
# call 3 (twenty-third session): CUT_OFFLOAD_WINDOW_RECLAIMS=0 (records taken back before their
# copy out was let go stay out of the fetch ahead's window) against the default (=1), GPT-2 and
# BERT two alternating processes per way, ResNet-50 one per way (exploratory).
# Decision rule, written before the run: 0 becomes the default only if, for GPT-2 and BERT, the
# median of the two processes' 75% cut steps (each the median of its last three) is at least 3%
# lower with 0, and the 50% median at most 3% higher; ResNet-50 must not be more than 3% slower
# at either cut.
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in gpt2 bert resnet50; do
  rounds="1 2"; [ $job = resnet50 ] && rounds=1
  for r in $rounds; do
    if [ $r = 1 ]; then ways="1 0"; else ways="0 1"; fi
    for v in $ways; do
      env CUT_OFFLOAD_WINDOW_RECLAIMS=$v CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/w/c3/$job-$v-$r timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/$job-$v-$r.log 2>&1
      echo "[$job wr=$v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c3/$job-$v-$r.log | head -2
      tar xzOf /tmp/w/c3/$job-$v-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c3/$job-$v-$r-inner.log 2>/dev/null
      grep -E "cut75 +[678] " -A3 /tmp/w/c3/$job-$v-$r-inner.log | grep -o "bwd [0-9.]*\|[0-9.]* GB fetched ahead\|[0-9.]* GB late\|device max [0-9.]* GB" | paste - - - - | tr '\n' ' '; echo
    done
  done
done
cd /tmp/w && tar czf $R/o.tgz c3
