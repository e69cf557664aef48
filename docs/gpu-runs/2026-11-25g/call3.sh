#!/usr/bin/env bash
# Thirty-ninth session, call 3: why recomputing cut steps give memory back on
# the GPU. Two throw-away builds that print each remap round and each give-back
# of an allocation (X_DBG): the library as it is (.carry/lib-base-dbg) and with
# the aligned remap destination (build-gpu, aligned-jump patch). BERT and GPT-2,
# CUT_RECOMPUTE=auto, planned+offload, defaults otherwise.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25g/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for lib in base new; do
  L=$PWD/build-gpu/src/libvmem.so.0
  [ $lib = base ] && L=$PWD/.carry/lib-base-dbg/libvmem.so.0
  VMEM_LIBRARY=$L X_DBG=1 OUT=$ROOT/$lib CUT_RECOMPUTE=auto CUT_JOBS=bert,gpt2 \
      CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
      timeout 280 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$lib.log" 2>&1
  echo "== $lib rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$lib.log"
  awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c); m=$0; sub(/.*regions \(/,"",m); sub(/; deferred.*/,"",m); mm=$0; sub(/.*driver mappings: /,"",mm); if (st>=8) print k, st, "cpu", c, "|", m, "|", mm}' "$ROOT/cut-bench-$lib.log" | cut -c1-330
  grep -c "^X release" "$ROOT/cut-bench-$lib.log"
  gzip -f "$ROOT/cut-bench-$lib.log"
done
