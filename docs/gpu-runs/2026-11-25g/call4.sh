#!/usr/bin/env bash
# Thirty-ninth session, call 4: call 3 found why BERT's recomputing 75% steps
# give memory back: a 1.9 GB request, the free tail short of it, and the
# largest hole made of 64/512 MiB mappings whose alignment the arena's end
# cuts, so its remap is refused. The padding variant (remap-pad-study.patch)
# first moves runs of 2 MiB mappings to the end until the end has that
# alignment. BERT only, one build with the X_DBG prints.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25g/call4.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for lib in pad; do
  L=$PWD/build-gpu/src/libvmem.so.0
  [ $lib = base ] && L=$PWD/.carry/lib-base-dbg/libvmem.so.0
  VMEM_LIBRARY=$L X_DBG=1 OUT=$ROOT/$lib CUT_RECOMPUTE=auto CUT_JOBS=bert \
      CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
      timeout 280 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$lib.log" 2>&1
  echo "== $lib rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$lib.log"
  awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c); m=$0; sub(/.*regions \(/,"",m); sub(/; deferred.*/,"",m); mm=$0; sub(/.*driver mappings: /,"",mm); if (st>=8) print k, st, "cpu", c, "|", m, "|", mm}' "$ROOT/cut-bench-$lib.log" | cut -c1-330
  grep -c "^X release" "$ROOT/cut-bench-$lib.log"
  gzip -f "$ROOT/cut-bench-$lib.log"
done
