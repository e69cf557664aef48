#!/usr/bin/env bash
# Thirty-fourth session, call 1: libvmem_recompute (the repeated blocks
# recomputed in the backward while cut). First its check with PyTorch's own
# allocator, then the five jobs' cut bench with CUT_RECOMPUTE=auto, then GPT-2
# and BERT with every block recomputed (all).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25b/call1.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers, timm; print(torch.__version__, transformers.__version__, timm.__version__)"
python3 scripts/gpu/recompute_check.py 2>&1 | tee "$OUT/recompute-check.log" | tail -45
ROOT=$OUT
OUT=$ROOT/auto CUT_RECOMPUTE=auto CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload \
    CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-auto.log" 2>&1
grep -E "^(job|gpt2|resnet50|bert|vit|convnext) " "$ROOT/cut-bench-auto.log" | head -30
grep -E "Error|Traceback|timeout" "$ROOT/cut-bench-auto.log" | head
OUT=$ROOT/all CUT_RECOMPUTE=all CUT_JOBS=gpt2,bert CUT_MODES=planned+offload \
    CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
    bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-all.log" 2>&1
grep -E "^(job|gpt2|bert) " "$ROOT/cut-bench-all.log" | head -12
gzip -f "$ROOT"/cut-bench-*.log
