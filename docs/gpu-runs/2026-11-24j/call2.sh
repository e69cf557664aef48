#!/bin/bash
# call 2 (twenty-fifth session): what the switch saves a job that fits.  One process per job;
# within it, from full step 4 on, hooks_always alternates 0 (the switch: hooks popped while
# nothing is offloaded) and 1 (pushed all the time, the way before), step by step; the same in
# the steps after the raise from 50%.  The cuts themselves run with the default.
# Rule, written before the run: the switch stays the default if no job's full steps are more
# than 2% slower (median) with it than with the hooks pushed all the time, and the checks of
# call 1 passed.
R=$OUT; mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in vit gpt2 resnet50 bert convnext; do
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=24 CUT_STEPS=6 CUT_RAISED=12 \
    CUT_ALT=hooks_always=0,1 CUT_ALT_PHASES=full,raised50 CUT_ALT_FROM=4 \
    OUT=/tmp/w/c2/$j timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2/$j.log 2>&1
  echo "[$j rc=$?]"
  tar xzOf /tmp/w/c2/$j/results.tgz ./cut-bench.sh.log > /tmp/w/c2/$j-inner.log 2>/dev/null
  grep -E '^alternate' /tmp/w/c2/$j-inner.log
done
cd /tmp/w && tar czf $R/o.tgz c2
