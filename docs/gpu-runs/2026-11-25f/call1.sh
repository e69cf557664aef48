#!/usr/bin/env bash
# Thirty-eighth session, call 1: part 6 of the framework proof (two-rank DDP,
# rank 1 cut to half its peak at step 10) on a one-GPU machine: both ranks on
# GPU 0 with the gloo backend (no two-GPU kind was lent).
# Command: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25f/call1.sh
# Carry: build-gpu/src build-gpu/tests/core build-gpu/tests/gpu build-gpu/tests/vmm
#        build-gpu/tests/fuzz build-gpu/tests/tags build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=$OUT/proof python3 scripts/gpu/framework_proof.py --parts 6 2>&1 | tail -8
for f in "$OUT"/proof/part6-ddp*.json; do echo "== $f"; python3 -c "
import json,sys
d=json.load(open('$f'))
for r in d.get('ranks',[d]):
    print({k: r.get(k) for k in ('rank','ok','cut','params_sha256','error')}, [round(x,4) for x in r.get('losses',[])][::6])
    st=r.get('stats') or {}; print('   spilledBytes', st.get('spilledBytes'), 'devicePeakInUse', st.get('devicePeakInUse'), 'offload', r.get('offload'))
"; done
cat "$OUT"/proof/part6-ddp.log | grep -v '^\s*$' | tail -15
