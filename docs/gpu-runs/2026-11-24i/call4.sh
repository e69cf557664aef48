#!/bin/bash
# call 4 (twenty-fourth session): (a) the hooks' CPU cost; (b) GPT-2 cut with the offload before
# (HEAD fade83a) and after this session's fixes, two alternating processes each.
# Rule, written before the run: the fixes cost GPT-2 if the median of the two "new" processes'
# 75% cut steps is more than 3% above the two "old" ones'.
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c4/hc timeout 130 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh hook-cost > /tmp/w/c4/hc.log 2>&1
echo "[hook-cost rc=$?]"
tar xzOf /tmp/w/c4/hc/results.tgz ./offload-autograd.sh.log 2>/dev/null | grep 'hook cost'
for r in old new old new; do
  if [ $r = old ]; then cp .carry/old/libvmem_offload.py python/libvmem_offload.py; else cp .carry/new_libvmem_offload.py python/libvmem_offload.py; fi
  CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=8 CUT_RAISED=1 \
    OUT=/tmp/w/c4/$r-$SECONDS timeout 105 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/$r-$SECONDS.log 2>&1
  echo "[$r rc=$?]"
  d=$(ls -td /tmp/w/c4/$r-* | grep -v '\.log$' | head -1)
  tar xzOf $d/results.tgz ./cut-bench.sh.log > $d-inner.log 2>/dev/null
  grep -E '^gpt2 +planned\+offload +[a-z]+ +cut(75|50) ' $d-inner.log | head -2
done
cp .carry/new_libvmem_offload.py python/libvmem_offload.py
cd /tmp/w && tar czf $R/o.tgz c4
