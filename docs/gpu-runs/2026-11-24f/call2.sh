#!/bin/bash
# call 2 (twenty-first session): the same knobs decided within each process (CUT_ALT): the
# value alternates per cut step from step 5 on, 6 steps each per cut, so the spread between
# processes (ResNet-50 at 75%: 78.9-127.9 ms across the six processes of call 1) drops out.
# Knobs: ahead_min 1 / 2 (double buffering in the fetch ahead), and the fetch ahead's window
# budget.window_in_frac 1/32 / 1/16. Both act within a step (the backward's fetch ahead).
# Decided beforehand, per knob: the second value becomes the default only if (a) for every job
# and cut, its median is at most 3% above the first value's median in the same process, and
# (b) for at least two of resnet50, effnet, convnext, vit at 75%, it is at least 3% below.
mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for knob in "ahead_min=1,2" "budget.window_in_frac=0.03125,0.0625"; do
  for job in ${JOBS:-resnet50 effnet convnext vit gpt2 bert}; do
    tag=${knob%%=*}-$job
    CUT_ALT=$knob CUT_ALT_FROM=5 CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=17 CUT_RAISED=1 \
      OUT=/tmp/w/c2/$tag timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2/$tag.log 2>&1
    echo "[$tag rc=$?]"
    tar xzOf /tmp/w/c2/$tag/results.tgz ./cut-bench.sh.log > /tmp/w/c2/$tag-inner.log 2>/dev/null
    grep "^alternate" /tmp/w/c2/$tag-inner.log | sed 's/, each.*;/;/; s/, each.*$//'
  done
done
tar czf $OUT/o.tgz -C /tmp w
