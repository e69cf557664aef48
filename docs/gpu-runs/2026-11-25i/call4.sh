#!/usr/bin/env bash
# Forty-first session, call 4: the GPU checks that run PyTorch through
# install_torch(), now with its default recomputation: the framework proof
# (all parts), the offload check (losses and gradients bitwise equal with and
# without the offload under a cut), autograd's other paths under the offload
# (the user's own checkpointing among them) and the GradScaler check.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call4.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
for s in framework_proof offload-check offload-autograd scaler-check; do
  f=scripts/gpu/$s.sh
  OUT=$ROOT/$s timeout 170 bash "$f" > "$ROOT/$s.log" 2>&1
  echo "== $s rc=$?"
  grep -E 'PASS|FAIL|Traceback|Error|=====' "$ROOT/$s.log" | cut -c1-260 | tail -16
done
grep -h -o '"recompute[^}]*}' "$ROOT"/*/*.json 2>/dev/null | sort | uniq -c | head
