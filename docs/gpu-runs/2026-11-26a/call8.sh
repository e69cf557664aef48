#!/usr/bin/env bash
# Forty-sixth session, call 8: recomputation leaves the placement plan of a step whose chosen
# blocks ran without recomputing in the last step (this tree's python/, N) against the adapters
# without it (5efdfda's python/, .carry/py-prev/python, P). (1) A cut during a step's forward
# (CUT_WITHIN=4), GPT-2 and BERT; (2) cuts between steps (the default), GPT-2 and ResNet-50, for
# a check that they are unchanged. planned+offload, no uncut process, in turn.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/py-prev
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call8.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OLDPY=$PWD/.carry/py-prev/python
run() {  # DIR JOB PYDIR WITHIN
    local d=$1 job=$2 py=$3 within=$4
    env OUT=$ROOT/$d VMEM_PYTHON_DIR=$py CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=$job \
        CUT_WITHIN=$within CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=2 timeout 140 \
        bash scripts/gpu/cut-bench.sh > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? python $py within $within"
    sed -n '/^job /,/^$/p' "$ROOT/$d-bench.log"
    grep -E "^$job planned\+offload cut(75|50) +[0-2] " "$ROOT/$d-bench.log" | cut -c1-120
}
run NW gpt2 "$PWD/python" 4
run PW gpt2 "$OLDPY" 4
run NWB bert "$PWD/python" 4
run PWB bert "$OLDPY" 4
run N gpt2 "$PWD/python" ""
run P gpt2 "$OLDPY" ""
run NR resnet50 "$PWD/python" ""
run PR resnet50 "$OLDPY" ""
gzip -f "$ROOT"/*.log
