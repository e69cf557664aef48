#!/usr/bin/env bash
# Forty-fourth session, call 1: four builds of the arena in turn, read as issue 11's replay
# target is (libvmem's ns/op over PyTorch's in one torch-replay --vmem process, vmm and cuda,
# every carried trace): v-base (HEAD 10b8e3e), v-ded (free chunks of dedicated regions in free
# lists of their own, docs/gpu-runs/2026-11-25k/dedicated-lists-trial.patch), v-slot (the live
# map's keys and values side by side in one array of slots), v-both. Libraries in
# .carry/v-*/src/libvmem.so.0, each with build-gpu/carry-cuda beside it. Rounds interleave the
# builds so that a cut-off run still compares them all.
# Carry: build-gpu/src build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LIBS=${LIBS:-v-base v-ded v-slot v-both}
ROUNDS=${ROUNDS_OUTER:-4}
summary() {
    # (it ran as an inline Python here-document: the same code, now the script)
    python3 scripts/gpu/replay_libs_summary.py "$OUT" $LIBS
}
for r in $(seq "$ROUNDS"); do
    for name in $LIBS; do
        BUILD=.carry/$name OUT="$OUT/r$r-$name" TORCH_REUSE=1 BACKENDS="torch+vmm torch+cuda" ROUNDS=1 \
            REPEAT=11 VAR=- VALUES=default bash scripts/gpu/replay-alternate.sh > "$OUT/r$r-$name.log" 2>&1 ||
            echo "round $r $name: exit $?"
    done
    echo "== after round $r ($SECONDS s)"
    summary
done
