#!/usr/bin/env bash
# Forty-sixth session, call 7: a cut made during a step (CUT_WITHIN=4: as the model's fifth
# repeated block starts its forward), where the model's key/value cache was made before the cut
# and the pre-hook cannot act: the offload's budget learned at that step's end less the relief
# to come (this tree's python/, N) against the adapters before the session (d28c74d's python/,
# .carry/py-head/python, H). GPT-2 and BERT, planned+offload, in turn.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/py-head
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call7.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OLDPY=$PWD/.carry/py-head/python
run() {  # DIR JOB PYDIR
    local d=$1 job=$2 py=$3
    env OUT=$ROOT/$d VMEM_PYTHON_DIR=$py CUT_MODES=planned+offload CUT_UNCUT=0 CUT_JOBS=$job \
        CUT_WITHIN=4 CUT_FULL=5 CUT_STEPS=8 CUT_RAISED=2 timeout 140 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? python $py"
    sed -n '/^job /,/^$/p' "$ROOT/$d-bench.log"
    grep -E "^$job planned\+offload cut(75|50) +[0-3] " "$ROOT/$d-bench.log" | cut -c1-150
}
run N1 gpt2 "$PWD/python"
run H1 gpt2 "$OLDPY"
run NB bert "$PWD/python"
run HB bert "$OLDPY"
gzip -f "$ROOT"/*.log
