#!/usr/bin/env bash
# Thirty-fourth session, call 3 (H100): two jobs neither the offload's spread
# rule nor recompute was tuned on (timm's EfficientNet-B0 and Swin-T), each
# with and without recompute in one call; then ResNet-50 with the model found
# by install_torch itself (VMEM_TORCH_RECOMPUTE=1, no recompute(model) call).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25b/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for rcm in auto 0; do
    OUT=$ROOT/untuned-$rcm CUT_RECOMPUTE=$rcm CUT_JOBS=effnet,swin CUT_MODES=planned+offload \
        CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-untuned-$rcm.log" 2>&1
    echo "== CUT_RECOMPUTE=$rcm"
    grep -E "^(job|effnet|swin) " "$ROOT/cut-bench-untuned-$rcm.log" | head -6
    grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-untuned-$rcm.log" | head
done
OUT=$ROOT/env VMEM_TORCH_RECOMPUTE=1 CUT_JOBS=resnet50 CUT_MODES=planned+offload \
    CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=3 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-env.log" 2>&1
grep -E "^(job|resnet50) |VMEM_TORCH_RECOMPUTE|Error|Traceback" "$ROOT/cut-bench-env.log" | head -8
gzip -f "$ROOT"/cut-bench-*.log
