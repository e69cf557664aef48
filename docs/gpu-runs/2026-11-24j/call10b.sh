#!/bin/bash
# call 10b (twenty-fifth session): learn_order, a second A/B (call 9's rule failed: it asked the
# per-block compiled GPT-2 for a gain at 75%, where it had no late bytes to remove).  Six jobs,
# one process each, CUT_ALT=learn_order=1,0 from cut step 4 (call 10a: 0,1; 10b: 1,0).
# Rule, written before calls 10a and 10b: learn_order becomes the default only if, pooling the
# two calls' steps per job and cut (median per value), no job and cut is more than 3% slower
# with it, and its late bytes per step are nowhere higher; else it stays a study knob.
R=$OUT; mkdir -p /tmp/w/c10b
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in resnet50 gpt2b vit convnext bert gpt2; do
  job=$j; comp=; if [ $j = gpt2b ]; then job=gpt2; comp=blocks; fi
  CUT_COMPILE=$comp CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=13 CUT_RAISED=1 \
    CUT_ALT=learn_order=1,0 OUT=/tmp/w/c10b/$j timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c10b/$j.log 2>&1
  echo "[$j rc=$?]"
  tar xzf /tmp/w/c10b/$j/results.tgz -C /tmp/w/c10b/$j ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null
  grep -E '^alternate' /tmp/w/c10b/$j/cut-bench.sh.log
  rm -f /tmp/w/c10b/$j/results.tgz
done
cd /tmp/w && tar czf $R/o.tgz c10b
