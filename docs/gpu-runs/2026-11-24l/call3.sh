#!/bin/bash
# call 3 (twenty-seventh session): the five jobs against issue 11's targets with the CPU's speed
# probed before each step (cut_bench's cpu_probe), the standard command.
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
  OUT=/tmp/w/c3/cb timeout 560 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/cb.outer 2>&1
echo "[cut-bench rc=$?]"
mkdir -p /tmp/w/c3/x && tar xzf /tmp/w/c3/cb/results.tgz -C /tmp/w/c3/x 2>/dev/null
cp /tmp/w/c3/x/cut-bench.sh.log /tmp/w/c3/cb.log
sed -n '/^job       mode     rule/,/^$/p' /tmp/w/c3/cb.log
sed -n '/^after each raise/,/^host bytes/p' /tmp/w/c3/cb.log
cp /tmp/w/c3/x/cut-bench.sh.out/cut-*.json /tmp/w/c3/ 2>/dev/null
cd /tmp/w && tar czf $R/o.tgz c3/cb.log c3/*.json
