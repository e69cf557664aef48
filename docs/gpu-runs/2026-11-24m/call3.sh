#!/bin/bash
# call 3 (twenty-eighth session): the GPU test suite on 5c1777a (the placement change), then GPT-2
# with the trials recorded (VMEM_TRACE_FILE, planner lines) for the study of the trial steps here.
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c3/tests timeout 330 bash scripts/gpu-run.sh device tests > /tmp/w/c3/tests.outer 2>&1; echo "[tests rc=$?]"
tail -25 /tmp/w/c3/tests.outer
CUT_JOBS=gpt2 CUT_FULL=5 CUT_STEPS=24 CUT_RAISED=2 CUT_UNCUT=0 CUT_MODES=planned+offload VMEM_LOG_LEVEL=debug \
  VMEM_TRACE_FILE=/tmp/w/c3/trials.trace OUT=/tmp/w/c3/trials \
  timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/trials.outer 2>&1; echo "[trials rc=$?]"
mkdir -p /tmp/w/c3/trials/x && tar xzf /tmp/w/c3/trials/results.tgz -C /tmp/w/c3/trials/x && cp /tmp/w/c3/trials/x/cut-bench.sh.log /tmp/w/c3/trials.log
mkdir -p /tmp/w/c3/tests/x && tar xzf /tmp/w/c3/tests/results.tgz -C /tmp/w/c3/tests/x && cp /tmp/w/c3/tests/x/tests.log /tmp/w/c3/tests.log
gzip -f /tmp/w/c3/trials.trace
cd /tmp/w && tar czf $R/o.tgz c3/*.log c3/*.outer c3/*.gz
