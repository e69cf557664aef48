#!/bin/bash
# call 5 (twenty-fifth session): where a compiled GPT-2's cut step goes (CUT_PROFILE=1, the
# default offload), and ResNet-50 compiled, with and without the offload.
R=$OUT; mkdir -p /tmp/w/c5
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_PROFILE=1 CUT_COMPILE=1 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=7 CUT_RAISED=1 \
  OUT=/tmp/w/c5/gpt2c-prof timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c5/gpt2c-prof.log 2>&1
echo "[gpt2 compiled profiled rc=$?]"
tar xzOf /tmp/w/c5/gpt2c-prof/results.tgz ./cut-bench.sh.log > /tmp/w/c5/gpt2c-prof-inner.log 2>/dev/null
grep -A24 '^profile gpt2' /tmp/w/c5/gpt2c-prof-inner.log | cut -c1-200 | head -60
rm -f /tmp/w/c5/gpt2c-prof/results.tgz
for m in planned+offload planned; do
  CUT_COMPILE=1 CUT_JOBS=resnet50 CUT_MODES=$m CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=7 CUT_RAISED=1 \
    OUT=/tmp/w/c5/r50c-$m timeout 150 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c5/r50c-$m.log 2>&1
  echo "[resnet50 compiled $m rc=$?]"
  tar xzOf /tmp/w/c5/r50c-$m/results.tgz ./cut-bench.sh.log > /tmp/w/c5/r50c-$m-inner.log 2>/dev/null
  grep -E '^resnet50 +planned(\+offload)? +(full|cut75|cut50) ' /tmp/w/c5/r50c-$m-inner.log | awk '{print $3, $4, $5}' | tr '\n' ';'; echo
  grep -A3 'job       mode     rule' /tmp/w/c5/r50c-$m-inner.log | head -4
done
find /tmp/w/c5 -name 'trace-*.json' -delete
cd /tmp/w && tar czf $R/o.tgz c5
