#!/bin/bash
# call 4 (twenty-first session): the closing measurement of issue 11 with this session's code:
# the five jobs, planned placement with the offload, an uncut process each for the losses,
# 8 full steps, 13 cut steps per cut, 4 steps after each raise (as the sixteenth session's call 8)
mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=${JOBS:-gpt2,resnet50,bert,vit,convnext} CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=4 \
  OUT=/tmp/w/c4/o timeout 570 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/cut.log 2>&1
echo "[cut rc=$?]"; sed -n '/^job /,$p' /tmp/w/c4/cut.log | head -80
tar czf $OUT/o.tgz -C /tmp w
