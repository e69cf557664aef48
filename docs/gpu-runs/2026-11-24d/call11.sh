#!/bin/bash
# call 11: the final offload (6fd93fd) on the jobs whose skew keeps the first tensors: GPT-2,
# BERT, ViT-B/16, with dense candidates (the default) and without (CUT_OFFLOAD_DENSE=0), the
# order alternating; the skew and the tensors out per step logged
mkdir -p /tmp/q/c11
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
i=0
for job in gpt2 bert vit; do
  if [ $((i % 2)) = 0 ]; then order="1 0"; else order="0 1"; fi
  i=$((i + 1))
  for d in $order; do
    CUT_OFFLOAD_DENSE=$d CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
      OUT=/tmp/q/c11/$job-$d timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/q/c11/$job-$d.log 2>&1
    echo "[$job dense=$d rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/q/c11/$job-$d.log | head -2
    tar xzOf /tmp/q/c11/$job-$d/results.tgz ./cut-bench.sh.log 2>/dev/null | grep "tensors out" | sort | uniq -c | sort -rn | head -3
  done
done
tar czf $OUT/o.tgz -C /tmp q
