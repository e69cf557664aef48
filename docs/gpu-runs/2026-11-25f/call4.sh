#!/usr/bin/env bash
# Thirty-eighth session, call 4: GPT-2 and BERT cut to 75% and 50%, the
# thirty-fourth session's library (88d19c6, built with -Dcuda=enabled
# -Dbuildtype=release and carried as .carry/oldlib34/src) and this session's
# in turn, two rounds, the Python of this tree for both: did the cut steps
# change between the libraries (call 3 read GPT-2 at 75% 1.42x full here,
# 1.28 in the thirty-fourth session's call 1)?
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call4.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/oldlib34
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
NEW=$VMEM_LIBRARY
OLD=$PWD/.carry/oldlib34/src/libvmem.so.0
for round in 1 2; do
  for lib in old new; do
    L=$NEW; [ $lib = old ] && L=$OLD
    OUT=$ROOT/$lib$round VMEM_LIBRARY=$L CUT_RECOMPUTE=auto CUT_JOBS=gpt2,bert CUT_MODES=planned+offload \
        CUT_FULL=8 CUT_RAISED=3 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$lib$round.log" 2>&1
    echo "== round $round, $lib library"
    grep -m1 'libvmem:' "$ROOT/cut-bench-$lib$round.log"
    sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$lib$round.log"
  done
done
gzip -f "$ROOT"/cut-bench-*.log
