#!/bin/bash
# call 4 (twenty-third session, exploratory): does a larger offload budget leave the arena room
# for the one allocation that makes GPT-2's settled 75% step give memory back and synchronise
# (the 24 ms stall of call 2's profile), and does the step pay for the extra bytes?
# CUT_ALT sets budget.bytes per cut step from step 4: 4.14e9 (about what GPT-2 learns at 75%),
# 4.70e9, 5.14e9 in turn; the 50% figures of this call mean nothing (a fixed budget there).
# Lead: in both processes, a larger value's median 75% step at least 5% below 4.14e9's.
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  if [ $r = 1 ]; then vals="4.14e9,4.70e9,5.14e9"; else vals="5.14e9,4.70e9,4.14e9"; fi
  env CUT_ALT="budget.bytes=$vals" CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=13 CUT_RAISED=1 \
    OUT=/tmp/w/c4/gpt2-$r timeout 150 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/gpt2-$r.log 2>&1
  echo "[gpt2 $r rc=$?]"
  tar xzOf /tmp/w/c4/gpt2-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c4/gpt2-$r-inner.log 2>/dev/null
  grep -iE "alt|CUT_ALT" /tmp/w/c4/gpt2-$r-inner.log | head -8
  grep -E "cut75 +([4-9]|1[0-2]) " /tmp/w/c4/gpt2-$r-inner.log | grep -o "cut75 *[0-9]* *[0-9.]* ms\|[0-9]* device syncs, [0-9.]* ms waited\|[0-9]* remaps\|unmap [0-9.]* ms" | paste - - - - | tr '\n' ';'; echo
  grep -E "cut75 +([4-9]|1[0-2]) " -A1 /tmp/w/c4/gpt2-$r-inner.log | grep -o "[0-9.]* GB out" | tr '\n' ' '; echo
done
cd /tmp/w && tar czf $R/o.tgz c4
