#!/bin/bash
# call 2: where ResNet-50's and ViT's 75% cut steps go now (spread by skew on, dense candidates):
# CUT_PROFILE=cpu (the last full step and the last step of each cut, with the CPU's activity)
mkdir -p /tmp/v/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in resnet50 vit; do
  CUT_PROFILE=cpu CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/v/c2/$job timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/v/c2/$job.log 2>&1
  echo "[$job rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +(full|cut(75|50)) " /tmp/v/c2/$job.log | tail -4
  tar xzOf /tmp/v/c2/$job/results.tgz ./cut-bench.sh.log 2>/dev/null > /tmp/v/c2/$job-inner.log
  grep -E "stream busy|idle|waited|compute stream|copy|hooks|pack|unpack|skew" /tmp/v/c2/$job-inner.log | grep -v "^ *$" | head -60
done
tar czf $OUT/o.tgz -C /tmp v
