#!/bin/bash
# call 9 (twenty-fifth session): learn_order A/B within one process per job (CUT_ALT
# learn_order=0,1 from cut step 4, 13 cut steps): GPT-2 with each block compiled, eager GPT-2,
# eager ResNet-50.
# Rule, written before the run: learn_order becomes the default only if the per-block compiled
# GPT-2's medians with it are at least 3% lower at both cuts, and eager GPT-2's and ResNet-50's
# at most 3% higher at either cut.
R=$OUT; mkdir -p /tmp/w/c9
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in gpt2b gpt2 resnet50; do
  job=${j%b}; comp=; [ $j = gpt2b ] && comp=blocks
  CUT_COMPILE=$comp CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=13 CUT_RAISED=1 \
    CUT_ALT=learn_order=0,1 OUT=/tmp/w/c9/$j timeout 170 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c9/$j.log 2>&1
  echo "[$j rc=$?]"
  tar xzOf /tmp/w/c9/$j/results.tgz ./cut-bench.sh.log > /tmp/w/c9/$j-inner.log 2>/dev/null
  grep -E '^alternate' /tmp/w/c9/$j-inner.log
  grep -E 'offload: ' /tmp/w/c9/$j-inner.log | sed -E 's/.*offload: ([0-9.]+ GB out).*, ([0-9.]+ GB late).*/\1 \2/' | tr '\n' ';'; echo
done
cd /tmp/w && tar czf $R/o.tgz c9
