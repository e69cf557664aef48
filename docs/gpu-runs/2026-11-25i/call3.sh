#!/usr/bin/env bash
# Forty-first session, call 3: call 2's benchmark again on the five jobs with
# install_torch()'s defaults (round 1), GPT-2 and BERT once more (round 2),
# and GPT-2 and ResNet-50 with recomputation off (CUT_RECOMPUTE=0: what the
# defaults gave before this change), all on one machine.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call3.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() { # name jobs [CUT_RECOMPUTE]
  OUT=$ROOT/$1 CUT_RECOMPUTE=${3:-} CUT_JOBS=$2 CUT_MODES=planned+offload CUT_UNCUT=0 \
      CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 timeout 200 bash scripts/gpu/cut-bench.sh \
      > "$ROOT/cut-bench-$1.log" 2>&1
  echo "== $1 rc=$?"
  sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$1.log"
  grep -E 'Traceback|Error' "$ROOT/cut-bench-$1.log" | head -3
}
run default-r1 gpt2,bert,resnet50,vit,convnext
run default-r2 gpt2,bert
run off gpt2,resnet50 0
for f in "$ROOT"/cut-bench-*.log; do
  echo "-- $f: full steps (ms) per job"
  awk '/^[a-z0-9]+ planned\+offload full/{print $1, $5}' "$f" | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k":"a[k]}'
done
gzip -f "$ROOT"/cut-bench-*.log
