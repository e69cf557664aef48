#!/bin/bash
# call 7 (twenty-fifth session): the five jobs against issue 11's targets with this session's
# offload (hooks switched, bulk skip), the protocol of the twenty-first session's call 4.
R=$OUT; mkdir -p /tmp/w/c7
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=4 CUT_UNCUT=0 \
  OUT=/tmp/w/c7/cb timeout 570 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c7/cb.log 2>&1
echo "[cut-bench rc=$?]"
tar xzOf /tmp/w/c7/cb/results.tgz ./cut-bench.sh.log > /tmp/w/c7/cb-inner.log 2>/dev/null
sed -n '/^job       mode     rule/,$p' /tmp/w/c7/cb-inner.log | head -60
cd /tmp/w && tar czf $R/o.tgz c7
