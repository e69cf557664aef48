#!/bin/bash
# call 4 (twenty-fifth session): bulk skip on eager jobs (it must find nothing consumed in bulk
# there: each job's cut steps, the default settings) and compiled GPT-2 with bulk skip off
# (call 3 ran it on).
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in gpt2 bert resnet50 vit convnext; do
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=7 CUT_RAISED=1 \
    OUT=/tmp/w/c4/$j timeout 90 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/$j.log 2>&1
  echo "[$j rc=$?]"
  tar xzOf /tmp/w/c4/$j/results.tgz ./cut-bench.sh.log > /tmp/w/c4/$j-inner.log 2>/dev/null
  echo "$j: $(grep -E "^$j +planned\+offload +(cut75|cut50) " /tmp/w/c4/$j-inner.log | awk '{print $3, $5}' | tr '\n' ';')"
  echo "$j bulk: $(grep -oE 'found consumed in bulk|\(([0-9.]+) GB found' /tmp/w/c4/$j-inner.log | grep -oE '[0-9.]+' | sort | uniq -c | tr '\n' ' ')"
done
CUT_COMPILE=1 CUT_OFFLOAD_BULK_SKIP=0 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=8 CUT_RAISED=1 \
  OUT=/tmp/w/c4/gpt2c-nobulk timeout 185 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/gpt2c-nobulk.log 2>&1
echo "[gpt2 compiled, bulk skip off rc=$?]"
tar xzOf /tmp/w/c4/gpt2c-nobulk/results.tgz ./cut-bench.sh.log > /tmp/w/c4/gpt2c-nobulk-inner.log 2>/dev/null
grep -E '^gpt2 +planned\+offload +(full|cut75|cut50) ' /tmp/w/c4/gpt2c-nobulk-inner.log | awk '{print $3, $4, $5}' | tr '\n' ';'; echo
grep -A3 'job       mode     rule' /tmp/w/c4/gpt2c-nobulk-inner.log | head -4
cd /tmp/w && tar czf $R/o.tgz c4
