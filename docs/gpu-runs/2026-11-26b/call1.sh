#!/usr/bin/env bash
# Forty-seventh session, call 1: cut runs of BERT, GPT-2 and ViT with the defaults (recomputation,
# offload, planner), recorded by libvmem (VMEM_TRACE_FILE), to study on sim-vmm why BERT's arena
# gives memory back in every cut step (20-27 ms of mapping calls a step at 75%, 66-119 ms at 50%
# in call 1 of 2026-11-26a) while GPT-2's settles after a few steps.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26b/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for job in bert gpt2 vit; do
    env OUT=$ROOT/$job VMEM_TRACE_FILE=$ROOT/trace_cut_$job.txt CUT_MODES=planned+offload \
        CUT_UNCUT=0 CUT_JOBS=$job CUT_FULL=5 CUT_STEPS=16 CUT_RAISED=2 timeout 170 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/$job-bench.log" 2>&1
    echo "== $job rc=$?"
    sed -n '/^job /,/^$/p' "$ROOT/$job-bench.log"
    gzip -f "$ROOT/trace_cut_$job.txt"
done
gzip -f "$ROOT"/*.log
