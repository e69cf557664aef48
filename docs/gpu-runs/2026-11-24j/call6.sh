#!/bin/bash
# call 6 (twenty-fifth session): GPT-2 with each transformer block compiled on its own
# (CUT_COMPILE=blocks), cut, with and without the offload.
R=$OUT; mkdir -p /tmp/w/c6
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for m in planned+offload planned; do
  CUT_COMPILE=blocks CUT_JOBS=gpt2 CUT_MODES=$m CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=8 CUT_RAISED=1 \
    OUT=/tmp/w/c6/gpt2b-$m timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c6/gpt2b-$m.log 2>&1
  echo "[gpt2 blocks compiled $m rc=$?]"
  tar xzOf /tmp/w/c6/gpt2b-$m/results.tgz ./cut-bench.sh.log > /tmp/w/c6/gpt2b-$m-inner.log 2>/dev/null
  grep -E 'compiled [0-9]+ blocks' /tmp/w/c6/gpt2b-$m-inner.log
  grep -E '^gpt2 +planned(\+offload)? +(full|cut75|cut50) ' /tmp/w/c6/gpt2b-$m-inner.log | awk '{print $3, $4, $5}' | tr '\n' ';'; echo
  grep -E 'offload: ' /tmp/w/c6/gpt2b-$m-inner.log | sed -E 's/.*offload: ([0-9.]+ GB out).*, ([0-9.]+ GB late).*skipped \(([0-9.]+ GB) found.*/\1 \2 bulk \3/' | tr '\n' ';'; echo
  grep -A3 'job       mode     rule' /tmp/w/c6/gpt2b-$m-inner.log | head -4
done
cd /tmp/w && tar czf $R/o.tgz c6
