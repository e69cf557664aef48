#!/usr/bin/env bash
# Forty-sixth session, call 5: the offload's skip of a candidate the budget left on the device
# whose first consumer came too soon for any copy (judge_kept; this tree's python/)
# against the adapters without it (5efdfda's python/, carried as .carry/py-prev/python). One
# library (this tree's; the C code is d28c74d's). GPT-2, BERT and ResNet-50, planned+offload, no uncut
# process: N (new) and O (before) in turn, twice for GPT-2.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/py-prev
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call5.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OLDPY=$PWD/.carry/py-prev/python
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
run NR resnet50 "$PWD/python"
run OR resnet50 "$OLDPY"
gzip -f "$ROOT"/*.log
