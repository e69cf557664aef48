#!/bin/bash
# call 8: spread with the small candidates left (CUT_OFFLOAD_SPREAD_LARGE=1) against the rule
# off and the rule as in call 3, with each step's tensors out and pinned memory made
mkdir -p /tmp/u/c8
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in convnext resnet50 effnet; do
  for v in off auto large; do
    case $v in off) e="CUT_OFFLOAD_SPREAD_AUTO=0";; auto) e="CUT_OFFLOAD_SPREAD_AUTO=1";;
                large) e="CUT_OFFLOAD_SPREAD_AUTO=1 CUT_OFFLOAD_SPREAD_LARGE=1";; esac
    env $e CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/u/c8/$job-$v timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/u/c8/$job-$v.log 2>&1
    echo "[$job $v rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/u/c8/$job-$v.log | head -2
    tar xzOf /tmp/u/c8/$job-$v/results.tgz ./cut-bench.sh.log 2>/dev/null | grep "tensors out" | tail -2
  done
done
tar czf $OUT/o.tgz -C /tmp u
