#!/usr/bin/env bash
# Forty-first session, call 7: after the review's refactor of the check
# (_Purity._state/_changed) and the argument guard (_plain_types): the check
# on GPT-2, a hooked block and counting blocks (recompute_default.py), and
# framework proof parts 1-2 (GPT-2, eager attention, cut: the guard's path).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call7.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 scripts/gpu/recompute_default.py gpt2 hooked counter 2>&1 | cut -c1-400
OUT=$OUT/proof timeout 120 python3 scripts/gpu/framework_proof.py --parts 1,2 2>&1 | grep -E '^[0-9] |PASS|FAIL' | cut -c1-300
