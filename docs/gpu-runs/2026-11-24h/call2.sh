#!/bin/bash
# call 2 (twenty-third session): GPT-2 at 75% and 50%, the default code (d5ac316's source),
# one process, CUT_PROFILE=1: the chrome trace of the last step of each cut, to see when the
# backward's copies back run against its kernels. Exploratory, nothing decided.
cd "$(dirname "$0")/.."
R=$OUT; mkdir -p /tmp/w/c2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_PROFILE=1 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
  OUT=/tmp/w/c2 timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2.log 2>&1
echo rc=$?
tail -5 /tmp/w/c2.log
cp /tmp/w/c2/results.tgz $R/results.tgz; cp /tmp/w/c2.log $R/
