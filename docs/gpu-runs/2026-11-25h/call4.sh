#!/usr/bin/env bash
# Fortieth session, call 4: variant 2 of the remaps off alignment. build-gpu:
# a13728d with remap-unaligned-study.patch and remap-unaligned-v2.patch (device
# memory created from an address off a big handle's boundary gets big and huge
# handles from there on, not granule handles up to the next boundary);
# .carry/lib-base: a13728d; .carry/lib-dbg2: variant 2 with the prints of
# remap-unaligned-prints.patch. The `tests` step runs test_vmm first.
# Round 1: base, v2 (BERT and GPT-2); round 2: v2, base (BERT); then v2 with
# prints (BERT). CUT_RECOMPUTE=auto, planned+offload.
# Command: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25h/call4.sh
# Carry: build-gpu/src build-gpu/tests/gpu build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() { # name library jobs [X_DBG]
  VMEM_LIBRARY=$2 X_DBG=${4:-} OUT=$ROOT/$1 CUT_RECOMPUTE=auto CUT_JOBS=$3 \
      CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
      timeout 150 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$1.log" 2>&1
  echo "== $1 rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$1.log"
  awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c); m=$0; sub(/.*regions \(/,"",m); sub(/; deferred.*/,"",m); mm=$0; sub(/.*driver mappings: /,"",mm); if (st>=8) print k, st, "cpu", c, "|", m, "|", mm}' "$ROOT/cut-bench-$1.log" | cut -c1-300
  grep -E 'Traceback|Error' "$ROOT/cut-bench-$1.log" | head -3
}
B=$PWD/.carry/lib-base/libvmem.so.0 N=$PWD/build-gpu/src/libvmem.so.0
run base1 $B bert,gpt2
run v2-1 $N bert,gpt2
run v2-2 $N bert
run base2 $B bert
run v2dbg $PWD/.carry/lib-dbg2/libvmem.so.0 bert 1
awk '/^bert planned\+offload cut75/{st=$4; print "-- step " st " done"; next} /^bert planned\+offload cut50/{exit} /^XR/ && st>=4 {print}' "$ROOT/cut-bench-v2dbg.log" | cut -c1-140 | head -70
gzip -f "$ROOT"/cut-bench-*.log
