#!/usr/bin/env bash
# Forty-sixth session, call 2: as call 1 (this tree's adapters against HEAD d28c74d's, one
# library), on gpt2var (GPT-2 whose steps draw 512, 768 or 1024 tokens): X (naive,
# planned+offload and the uncut process, this tree's), P (planned+offload, the adapters
# before), X2, P2; each read against X's naive and uncut steps.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda .carry/py-head
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-26a/call2.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OLDPY=$PWD/.carry/py-head/python
run() {  # DIR MODES UNCUT PYDIR
    local d=$1 modes=$2 uncut=$3 py=$4
    env OUT=$ROOT/$d VMEM_PYTHON_DIR=$py CUT_MODES=$modes CUT_UNCUT=$uncut CUT_JOBS=gpt2var \
        CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 timeout 150 bash scripts/gpu/cut-bench.sh \
        > "$ROOT/$d-bench.log" 2>&1
    echo "== $d rc=$? python $py"
    [ "$d" = X ] || cp "$ROOT"/X/cut-gpt2var-naive.json "$ROOT"/X/cut-gpt2var-uncut.json "$ROOT/$d/" 2>/dev/null
    python3 scripts/gpu/cut_steps_report.py "$ROOT/$d" gpt2var | grep -v '^cut75 *[0-9]\|^cut50 *[0-9]'
}
run X naive,planned+offload 1 "$PWD/python"
run P planned+offload 0 "$OLDPY"
run X2 planned+offload 0 "$PWD/python"
run P2 planned+offload 0 "$OLDPY"
gzip -f "$ROOT"/*.log
