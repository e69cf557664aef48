#!/bin/bash
# call 2: the front skew rule (CUT_OFFLOAD_SPREAD_AUTO) on two timm jobs not tuned on
# (EfficientNet-B0, Swin-T), ResNet-50 again, and ConvNeXt with the rule's threshold at 1.25
mkdir -p /tmp/y/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
i=0
for job in effnet swin resnet50 convnext; do
  if [ $((i % 2)) = 0 ]; then order="0 1"; else order="1 0"; fi
  i=$((i + 1))
  sk=""; [ $job = convnext ] && sk=1.25
  for a in $order; do
    CUT_OFFLOAD_SKEW_MIN=$sk CUT_OFFLOAD_SPREAD_AUTO=$a CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/y/c2/$job-$a timeout 120 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/y/c2/$job-auto$a.log 2>&1
    echo "[$job auto=$a rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +(full|cut(75|50)) " /tmp/y/c2/$job-auto$a.log | tail -4
    tar xzOf /tmp/y/c2/$job-$a/results.tgz ./cut-bench.sh.log 2>/dev/null | grep "front skew" | sort | uniq -c
  done
done
tar czf $OUT/o.tgz -C /tmp y
