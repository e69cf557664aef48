#!/bin/bash
# call 6: longer recorded cut runs (VMEM_TRACE_FILE) of GPT-2 and BERT, 30 steps per cut, for
# studying a block layout under a limit on the CPU (bench/replay_recorded.py): the traces of
# docs/gpu-runs/2026-11-24c/ hold only 3-7 settled cut steps
mkdir -p /tmp/y/c6
cd "$(dirname "$0")/.."
for job in gpt2 bert; do
  VMEM_TRACE_FILE=/tmp/y/c6/trace_cut30_$job.txt CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=30 CUT_RAISED=1 \
    OUT=/tmp/y/c6/$job timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/y/c6/$job.log 2>&1
  echo "[$job rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/y/c6/$job.log
  gzip -f /tmp/y/c6/trace_cut30_$job*.txt; ls -la /tmp/y/c6/trace_cut30_$job*
  tar xzOf /tmp/y/c6/$job/results.tgz ./cut-bench.sh.log > /tmp/y/c6/$job-inner.log 2>/dev/null
done
tar czf $OUT/o.tgz -C /tmp y
