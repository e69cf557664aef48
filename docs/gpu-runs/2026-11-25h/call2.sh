#!/usr/bin/env bash
# Fortieth session, call 2: the remaps off alignment again. What an alias off
# its handle's alignment costs and whether kernels run slower through it
# (scripts/gpu/remap_probe.py 7), then a second round of call 1's cut-bench A/B
# (BERT and GPT-2, CUT_RECOMPUTE=auto, planned+offload), new library first.
# build-gpu and .carry/lib-base as in call 1.
# The GPU suite's test_vmm runs first (the `tests` step).
# Command: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25h/call2.sh
# Carry: build-gpu/src build-gpu/tests/gpu build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
timeout 120 python3 scripts/gpu/remap_probe.py 7
for lib in new base; do
  L=$PWD/build-gpu/src/libvmem.so.0
  [ $lib = base ] && L=$PWD/.carry/lib-base/libvmem.so.0
  VMEM_LIBRARY=$L OUT=$ROOT/$lib CUT_RECOMPUTE=auto CUT_JOBS=bert,gpt2 \
      CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
      timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$lib.log" 2>&1
  echo "== $lib rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$lib.log"
  awk '/^[a-z0-9]+ planned\+offload cut/{k=$1" "$3; st=$4; c=$0; sub(/.*cpu /,"",c); sub(/\).*/,"",c); m=$0; sub(/.*regions \(/,"",m); sub(/; deferred.*/,"",m); mm=$0; sub(/.*driver mappings: /,"",mm); if (st>=9) print k, st, "cpu", c, "|", m, "|", mm}' "$ROOT/cut-bench-$lib.log" | cut -c1-330
  grep -E 'Traceback|Error|libvmem: vmm' "$ROOT/cut-bench-$lib.log" | head -5
  gzip -f "$ROOT/cut-bench-$lib.log"
done
