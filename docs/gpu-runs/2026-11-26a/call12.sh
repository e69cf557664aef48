#!/usr/bin/env bash
# Forty-sixth session, call 12: the offload check with by_shape on by default (this tree).
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call12.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/offload-check timeout 200 bash scripts/gpu/offload-check.sh > "$ROOT/offload-check.log" 2>&1
echo "== offload-check rc=$?"; grep -E 'PASS|FAIL' "$ROOT/offload-check.log" | cut -c1-160 | tail -12
gzip -f "$ROOT"/*.log
