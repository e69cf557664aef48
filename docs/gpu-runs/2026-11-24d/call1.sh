#!/bin/bash
# call 1: the skew rule for spread (CUT_OFFLOAD_SPREAD_AUTO) against the default, per job one
# process each way, the order alternating between jobs
mkdir -p /tmp/x/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
i=0
for job in resnet50 gpt2 convnext bert vit; do
  if [ $((i % 2)) = 0 ]; then order="0 1"; else order="1 0"; fi
  i=$((i + 1))
  for a in $order; do
    CUT_OFFLOAD_SPREAD_AUTO=$a CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/x/c1/$job-$a timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c1/$job-auto$a.log 2>&1
    echo "[$job auto=$a rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +(full|cut(75|50)) " /tmp/x/c1/$job-auto$a.log | tail -4
    grep -h "front skew" /tmp/x/c1/$job-$a/cut-bench.sh.log 2>/dev/null | tail -3
  done
done
tar czf $OUT/o.tgz -C /tmp x
