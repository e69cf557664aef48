#!/bin/bash
# call 7 (twenty-first session): where the offload's hooks spend the CPU in GPT-2's and BERT's
# 75% cut steps (CUT_PROFILE=py: cProfile of the last full step and the last step of each cut)
mkdir -p /tmp/w/c7
cd "$(dirname "$0")/.."
for job in gpt2 bert; do
  CUT_PROFILE=py CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/w/c7/$job timeout 150 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c7/$job.log 2>&1
  echo "[$job rc=$?]"
  tar xzOf /tmp/w/c7/$job/results.tgz ./cut-bench.sh.log > /tmp/w/c7/$job-inner.log 2>/dev/null
  sed -n '/python profile .* cut75/,/^[a-z]/p' /tmp/w/c7/$job-inner.log | head -60
done
tar czf $OUT/o.tgz -C /tmp w
