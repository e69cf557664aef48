#!/bin/bash
# call 3: offload-check with a saved tensor dense in another order; the offload taking such
# tensors (channels_last) with the front skew rule off and on: EfficientNet-B0, ConvNeXt-Tiny,
# and ResNet-50 again
mkdir -p /tmp/z/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/z/c3/check timeout 200 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/z/c3/offload-check.log 2>&1
echo "[offload-check rc=$?]"; grep -E "PASS|FAIL|cut step ms" /tmp/z/c3/offload-check.log | tail -14
i=0
for job in effnet convnext resnet50; do
  if [ $((i % 2)) = 0 ]; then order="0 1"; else order="1 0"; fi
  i=$((i + 1))
  for a in $order; do
    CUT_OFFLOAD_SPREAD_AUTO=$a CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/z/c3/$job-$a timeout 120 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/z/c3/$job-auto$a.log 2>&1
    echo "[$job auto=$a rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +(full|cut(75|50)) " /tmp/z/c3/$job-auto$a.log | tail -4
    tar xzOf /tmp/z/c3/$job-$a/results.tgz ./cut-bench.sh.log 2>/dev/null | grep "front skew" | sort | uniq -c
  done
done
tar czf $OUT/o.tgz -C /tmp z
