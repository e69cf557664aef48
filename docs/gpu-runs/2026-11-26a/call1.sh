#!/usr/bin/env bash
# Forty-sixth session, call 1: the cut's first steps with recomputation decided before the
# model's forward (its key/value cache not made under a new cut) and the offload's budget
# learned less what recomputation will take off next (Recompute.relief_to_come), against the
# Python adapters before (HEAD d28c74d's python/, carried as .carry/py-head/python). One
# library (this tree's; the C code is unchanged). GPT-2 and BERT, planned+offload, no uncut
# process: N (new) and O (old) in turn, twice for GPT-2.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/py-head
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OLDPY=$PWD/.carry/py-head/python
run() {  # DIR JOB PYDIR
    local d=$1 job=$2 py=$3
    env OUT=$ROOT/$d VMEM_PYTHON_DIR=$py CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=$job \
        CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=2 timeout 140 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? python $py"
    sed -n '/^job /,/^$/p' "$ROOT/$d-bench.log"
    grep -E "^$job planned\+offload cut(75|50) +[0-3] " "$ROOT/$d-bench.log" | cut -c1-150
}
run N1 gpt2 "$PWD/python"
run O1 gpt2 "$OLDPY"
run N2 gpt2 "$PWD/python"
run O2 gpt2 "$OLDPY"
run NB bert "$PWD/python"
run OB bert "$OLDPY"
gzip -f "$ROOT"/*.log
