#!/bin/bash
# call 3: traces of cut runs recorded by libvmem (VMEM_TRACE_FILE), GPT-2, BERT, ResNet-50
mkdir -p /tmp/x/c3
cd "$(dirname "$0")/.."
for job in gpt2 bert resnet50; do
  VMEM_TRACE_FILE=/tmp/x/c3/trace_cut_$job.txt CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c3/$job timeout 150 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c3/$job.log 2>&1
  echo "[$job]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/x/c3/$job.log
  ls -la /tmp/x/c3/trace_cut_$job* ; gzip -f /tmp/x/c3/trace_cut_$job*.txt
done
tar czf $OUT/o.tgz -C /tmp x
