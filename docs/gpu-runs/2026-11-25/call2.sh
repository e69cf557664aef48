#!/usr/bin/env bash
# Thirty-third session, call 2: issue 11's "nothing regresses" target for replay speed, read
# with the final code: libvmem's ns/op over PyTorch's caching allocator, both in one process
# (torch-replay --vmem, passes alternating), vmm and cuda backends, every carried trace, three
# processes per trace and backend. The target was last read in the sixth session (2026-11-23);
# the hot path has gained work since (address-ordered bins, the planner's later rules).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
# Run from the repository root: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25/call2.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
BACKENDS="torch+vmm torch+cuda" ROUNDS=3 REPEAT=11 VAR=- VALUES=default \
    bash scripts/gpu/replay-alternate.sh 2>&1 | tee "$OUT/replay-alternate.log" | tail -40
