#!/bin/bash
# call 5 (twenty-first session), exploratory: does the big handle size move GPT-2's and BERT's
# cut steps? Their cut steps spend 45-65 ms of CPU a step in the driver's mapping calls (remaps
# and the one release), about 1 ms per handle while copies to host run. VMEM_VMM_BIG_MIB 64
# (default) against 256 (and 16 for GPT-2), one process each, alternated twice. Not a decision
# run: a larger default would touch every vmm figure (min_limit, pause, moves).
mkdir -p /tmp/w/c5
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # job big rep
  VMEM_VMM_BIG_MIB=$2 CUT_JOBS=$1 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=13 CUT_RAISED=1 \
    OUT=/tmp/w/c5/$1-$2-$3 timeout 90 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c5/$1-$2-$3.log 2>&1
  echo "[$1 big $2 rep $3 rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c5/$1-$2-$3.log | head -2
  tar xzOf /tmp/w/c5/$1-$2-$3/results.tgz ./cut-bench.sh.log > /tmp/w/c5/$1-$2-$3-inner.log 2>/dev/null
  grep -E "cut75 +1[012] " /tmp/w/c5/$1-$2-$3-inner.log | grep -o "cpu [0-9.]*)\|[0-9]* remaps\|unmap [0-9.]* ms, remap [0-9.]* ms" | paste - - - | tr '\n' ' '; echo
}
for rep in 1 2; do
  for big in 64 256 16; do run gpt2 $big $rep; done
  for big in 64 256; do run bert $big $rep; done
done
tar czf $OUT/o.tgz -C /tmp w
