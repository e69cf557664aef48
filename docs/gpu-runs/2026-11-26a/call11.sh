#!/usr/bin/env bash
# Forty-sixth session, call 11: the offload's budget per step shape on by default (this tree),
# on jobs whose steps all look alike, against CUT_OFFLOAD_BY_SHAPE=0 (one budget): GPT-2, BERT
# and ResNet-50, planned+offload, cuts between steps, S (default, by_shape) and D in turn.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call11.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
run() {  # DIR JOB BY_SHAPE (empty: the default)
    local d=$1 job=$2 bs=$3
    env OUT=$ROOT/$d CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=$job CUT_OFFLOAD_BY_SHAPE=$bs \
        CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=2 timeout 140 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? by_shape '$bs'"
    sed -n '/^job /,/^$/p' "$ROOT/$d-bench.log"
}
run S gpt2 ""
run D gpt2 0
run SB bert ""
run DB bert 0
run SR resnet50 ""
run DR resnet50 0
gzip -f "$ROOT"/*.log
