#!/usr/bin/env bash
# Forty-first session, call 2: the cut benchmark with install_torch()'s
# defaults only (no CUT_RECOMPUTE: the model is found and its checked blocks
# recompute while cut), GPT-2, ResNet-50 and BERT, planned+offload; then the
# wrappers' cost on an uncut GPT-2 step (recompute_default.py overhead).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call2.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() { # name jobs
  OUT=$ROOT/$1 CUT_JOBS=$2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 \
      CUT_RAISED=2 timeout 170 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$1.log" 2>&1
  echo "== $1 rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$1.log"
  grep -m3 -E 'recompute \(found|recompute: ' "$ROOT/cut-bench-$1.log" | cut -c1-400
  grep -E 'Traceback|Error' "$ROOT/cut-bench-$1.log" | head -3
}
run default-gpt2-bert gpt2,bert
run default-resnet50 resnet50
python3 scripts/gpu/recompute_default.py overhead 2>&1 | tee "$ROOT/overhead.jsonl" | cut -c1-600
gzip -f "$ROOT"/cut-bench-*.log
