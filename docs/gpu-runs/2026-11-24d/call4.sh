#!/bin/bash
# call 4: channels_last saved tensors as candidates (CUT_OFFLOAD_DENSE=1, the new default) against
# contiguous ones only (=0, the way before): ConvNeXt-Tiny and EfficientNet-B0, alternating
mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in convnext effnet; do
  for d in 0 1 0 1; do
    n=$((${n:-0} + 1))
    CUT_OFFLOAD_DENSE=$d CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/w/c4/$job-$d-$n timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/$job-dense$d-$n.log 2>&1
    echo "[$job dense=$d run $n rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c4/$job-dense$d-$n.log | head -2
  done
done
tar czf $OUT/o.tgz -C /tmp w
