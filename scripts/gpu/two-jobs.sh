#!/usr/bin/env bash
# Two PyTorch training jobs on one GPU, each on libvmem with its own control
# file, steered by examples/two_jobs/scheduler.py (docs/kubernetes.md).
# About 4 minutes on an H100 (run 8: 242 s with TWO_JOBS_REPEAT=3): four runs (high-priority job alone,
# opportunistic job alone, static 50/50, dynamic), a table last, JSON, CSV and
# an SVG plot under $OUT.
#
#   scripts/gpu-run.sh device scripts/gpu/two-jobs.sh      # through the runner
#   OUT=/tmp/two bash scripts/gpu/two-jobs.sh              # standalone (build-gpu/ built)
# Knobs (environment): TWO_JOBS_HP_PHASES (default 192:120,288:120,384:120 = batch:steps,
# GPU-bound; runs 1-7 used 32:120,96:120,192:120),
# TWO_JOBS_OPP_BATCH (96), TWO_JOBS_MODEL (resnet50), TWO_JOBS_HP_MAX_SECONDS (35),
# TWO_JOBS_SCHEDULER_ARGS (--interval 0.02), TWO_JOBS_REPEAT (2: hp-alone and dynamic run that
# many times, alternating; phase ratios of the medians over the runs), TWO_JOBS_RUNS (hp-alone,opp-alone,static,dynamic:
# the runs to do; hp-alone and dynamic always run), TWO_JOBS_BUDGET (bytes or 6G-style; required
# without opp-alone; run 4's was 6174015488, run 8's 10468982784).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-two-jobs}" "${BUILD:=build-gpu}"
export OUT BUILD
mkdir -p "$OUT"
if [ -z "${VMEM_LIBRARY:-}" ]; then
    export VMEM_LIBRARY="$PWD/$BUILD/src/libvmem.so.0"
fi
if [ ! -e "$VMEM_LIBRARY" ] || [ ! -x "$BUILD/tools/vmemctl" ]; then
    echo "two-jobs: $VMEM_LIBRARY or $BUILD/tools/vmemctl missing (scripts/gpu-run.sh prepare)"
    exit 2
fi
export LD_LIBRARY_PATH="$(dirname "$VMEM_LIBRARY"):$PWD/$BUILD/carry-cuda:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
exec python3 scripts/gpu/two_jobs.py
