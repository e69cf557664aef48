#!/usr/bin/env bash
# Forty-sixth session, call 4: the framework proof, parts 1-2, again, with part 2's verdict
# asking that the cut bites (bytes spilled, or blocks recomputed, or saved tensors offloaded).
# In call 3 part 2 failed on "spilled 0 MiB" alone: the cut's first step now recomputes, so
# nothing spills (every other check of the part passed).
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call4.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/proof timeout 150 python3 scripts/gpu/framework_proof.py --parts 1,2,3 > "$ROOT/proof.log" 2>&1
echo "== proof rc=$?"; grep -E '^[0-9] |PASS|FAIL|error' "$ROOT/proof.log" | cut -c1-330 | tail -6
gzip -f "$ROOT"/*.log
