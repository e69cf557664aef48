#!/bin/bash
# call 14: the new default (spread by skew, spread_large) against the rule off on the two jobs not
# tuned on, alternating three times per job on one machine: EfficientNet-B0 and Swin-T
mkdir -p /tmp/k/c14
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in effnet swin; do
  for r in 1 2 3; do
    for v in off on; do
      case $v in off) e="CUT_OFFLOAD_SPREAD_AUTO=0";; on) e="CUT_OFFLOAD_SPREAD_AUTO=1";; esac
      env $e CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/k/c14/$job-$v-$r timeout 80 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/k/c14/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/k/c14/$job-$v-$r.log | head -2
    done
  done
done
tar czf $OUT/o.tgz -C /tmp k
