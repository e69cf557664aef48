#!/usr/bin/env bash
# Forty-fourth session, call 2: a job whose steps differ, under a cut, on the GPU. GPT-2 small
# with each step's sequence length drawn from 512, 768 and 1024 tokens by its step number
# (cut_bench.py job gpt2var; the planner was not tuned on it): naive placement, the planner
# alone, the planner with the saved-tensor offload (the PyTorch defaults of install_torch), and
# an uncut process with the same steps. Read per step against the uncut process's step of the
# same number (same shape, same data), and planned against naive host bytes per step.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call2.sh
set -uo pipefail
# (the per-step report ran inline as a Python here-document; it is now
# scripts/gpu/cut_steps_report.py, the same code)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
env OUT=$ROOT/cut CUT_MODES=naive,planned,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 500 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench.log" 2>&1
echo "== cut-bench rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench.log"
python3 scripts/gpu/cut_steps_report.py "$ROOT/cut" gpt2var
gzip -f "$ROOT"/*.log
