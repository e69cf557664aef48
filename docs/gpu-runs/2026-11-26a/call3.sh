#!/usr/bin/env bash
# Forty-sixth session, call 3: checks of this tree's adapters on the GPU. (1)
# recompute_wrapped.py: GPT-2 in DistributedDataParallel (world size 1), cut between steps:
# the inner model's config found, the first cut step recomputes with no call run plain, the
# losses bitwise equal to the uncut run's; (2) the framework proof, parts 1-2; (3)
# recompute_check.py (bitwise against the same step without recomputation); (4) the offload
# check.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call3.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
timeout 150 python3 scripts/gpu/recompute_wrapped.py > "$ROOT/wrapped.log" 2>&1
echo "== recompute_wrapped rc=$?"; grep -E '^(ok|FAIL)' "$ROOT/wrapped.log" | cut -c1-300
OUT=$ROOT/proof timeout 120 python3 scripts/gpu/framework_proof.py --parts 1,2 > "$ROOT/proof.log" 2>&1
echo "== proof rc=$?"; grep -E '^[0-9] |PASS|FAIL|error' "$ROOT/proof.log" | cut -c1-300 | tail -6
timeout 120 python3 scripts/gpu/recompute_check.py > "$ROOT/recompute-check.log" 2>&1
echo "== recompute_check rc=$?"; grep -cE '^ok' "$ROOT/recompute-check.log"; grep -E 'FAIL|Error' "$ROOT/recompute-check.log" | cut -c1-200 | tail -5
OUT=$ROOT/offload-check timeout 150 bash scripts/gpu/offload-check.sh > "$ROOT/offload-check.log" 2>&1
echo "== offload-check rc=$?"; grep -E 'PASS|FAIL' "$ROOT/offload-check.log" | cut -c1-160 | tail -10
gzip -f "$ROOT"/*.log
