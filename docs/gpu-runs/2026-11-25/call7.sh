#!/usr/bin/env bash
# Thirty-third session, call 7: the replay target with the session's final code on an H100, the
# kind of machine the sixth session read it on (0.165-0.196 then): libvmem's ns/op over PyTorch's
# in one process, vmm and cuda, every carried trace, three processes per trace and backend.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
BACKENDS="torch+vmm torch+cuda" ROUNDS=3 REPEAT=11 VAR=- VALUES=default \
    bash scripts/gpu/replay-alternate.sh 2>&1 | tee "$OUT/replay-alternate.log" | tail -24
