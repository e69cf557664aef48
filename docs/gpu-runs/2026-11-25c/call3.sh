#!/usr/bin/env bash
# Thirty-fifth session, call 3: the cut's transition with the planner idling while uncapped
# (7bc873c) against the library before it (.carry/oldlib, aa49ad3): GPT-2 and ResNet-50
# cut after 8 full steps, the allocator's planner alone ("planned": the step after the cut is
# planned from the last step recorded, which is now up to 14 steps old) and with the offload and
# recomputation (the configuration of the thirty-fourth session's figures).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25c/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for lib in old new; do
    so=$PWD/build-gpu/src/libvmem.so.0
    [ $lib = old ] && so=$PWD/.carry/oldlib/src/libvmem.so.0
    OUT=$ROOT/$lib VMEM_LIBRARY=$so CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50 \
        CUT_MODES=planned,planned+offload CUT_FULL=8 CUT_RAISED=4 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$lib.log" 2>&1
    echo "== $lib ($so)"
    sed -n '/^job /,/^phases/p' "$ROOT/cut-bench-$lib.log"
    sed -n '/^what a cut costs once/,/^after each/p' "$ROOT/cut-bench-$lib.log" | cut -c1-200
    grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-$lib.log" | head
done
gzip -f "$ROOT"/cut-bench-*.log
