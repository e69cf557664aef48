#!/usr/bin/env bash
# A/B of the PyTorch offload (python/, scripts/) between an earlier tree and
# this one, on one GPU machine: per round and job, the earlier tree's
# cut-bench then this tree's, one process each, against the same libvmem.so.
#
# Here, first (the device copy of the tree has no git history):
#   bash scripts/gpu-run.sh prepare
#   rm -rf .carry/before && mkdir -p .carry/before &&
#       git archive REV python scripts | tar -x -C .carry/before
# Then on the device (carry: build-gpu, .carry):
#   AB_JOBS="resnet50 gpt2 bert" AB_ROUNDS=1 bash scripts/gpu-run.sh device scripts/gpu/offload-ab.sh
# Each run's log: $OUT/{before,after}-JOB-ROUND/log.txt.  Other CUT_* settings
# pass through (CUT_MODES defaults to planned+offload, CUT_UNCUT to 0).
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
BEFORE=${BEFORE:-$ROOT/.carry/before}
if [ ! -f "$BEFORE/scripts/gpu/cut-bench.sh" ]; then
    echo "offload-ab: no earlier tree at $BEFORE (see the comment at the top)" >&2
    exit 2
fi
export VMEM_LIBRARY=${VMEM_LIBRARY:-$ROOT/build-gpu/src/libvmem.so} BUILD=${BUILD:-$ROOT/build-gpu}
export CUT_MODES=${CUT_MODES:-planned+offload} CUT_UNCUT=${CUT_UNCUT:-0}
base=${OUT:-/tmp/vmem-ab}
for round in $(seq 1 "${AB_ROUNDS:-1}"); do
    for job in ${AB_JOBS:-resnet50 gpt2 bert}; do
        for v in before after; do
            d=$base/$v-$job-$round
            mkdir -p "$d"
            if [ "$v" = before ]; then s=$BEFORE/scripts/gpu/cut-bench.sh; else s=$ROOT/scripts/gpu/cut-bench.sh; fi
            echo "=== $v $job round $round"
            OUT=$d CUT_JOBS=$job timeout 300 bash "$s" >"$d/log.txt" 2>&1
            echo "rc=$?"
            tail -14 "$d/log.txt" | grep -E "cut(75|50) " | cut -c1-150
        done
    done
done
