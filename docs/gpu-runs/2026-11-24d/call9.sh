#!/bin/bash
# call 9: the decision run for spread by skew with the small candidates left
# (CUT_OFFLOAD_SPREAD_AUTO=1 CUT_OFFLOAD_SPREAD_LARGE=1) against the default, alternating three
# times per job on one machine; decided beforehand: adopted as the default only if, for both
# jobs, the median 75% cut step of the three "large" processes is below that of the three
# "off" ones and the 50% one is not more than 3% above
mkdir -p /tmp/s/c9
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in convnext resnet50; do
  for r in 1 2 3; do
    for v in off large; do
      case $v in off) e="CUT_OFFLOAD_SPREAD_AUTO=0";;
                  large) e="CUT_OFFLOAD_SPREAD_AUTO=1 CUT_OFFLOAD_SPREAD_LARGE=1";; esac
      env $e CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/s/c9/$job-$v-$r timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/s/c9/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/s/c9/$job-$v-$r.log | head -2
    done
  done
done
tar czf $OUT/o.tgz -C /tmp s
