#!/bin/bash
# call 10: the new default (spread by skew with spread_large) against an uncut process of the same
# seed: losses bitwise equal? ResNet-50 and ConvNeXt-Tiny
mkdir -p /tmp/r/c10
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in resnet50 convnext; do
  CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=1 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/r/c10/$job timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/r/c10/$job.log 2>&1
  echo "[$job rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/r/c10/$job.log | head -2
  tar xzOf /tmp/r/c10/$job/results.tgz ./cut-bench.sh.log 2>/dev/null | grep "front skew" | sort | uniq -c | sort -rn | head -3
done
tar czf $OUT/o.tgz -C /tmp r
