#!/bin/bash
# call 1 (twenty-fourth session): the offload against autograd's less common paths.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
OUT=/tmp/w/c1/run timeout 570 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c1/outer.log 2>&1
echo "[rc=$?]"
tar xzOf /tmp/w/c1/run/results.tgz ./offload-autograd.sh.log > /tmp/w/c1/inner.log 2>/dev/null
grep -v '^\(checkpoint\|reentrant\|retain_graph\|double_backward\|lstm\|compile\|custom_function\|dropped_graph\|inplace\) \(full\|cut50\|raised\)' /tmp/w/c1/inner.log | tail -60
tail -5 /tmp/w/c1/outer.log
cd /tmp/w && tar czf $R/o.tgz c1
