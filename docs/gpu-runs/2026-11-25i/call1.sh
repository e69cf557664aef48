#!/usr/bin/env bash
# Forty-first session, call 1: install_torch() recomputes by default (checked
# blocks only, while cut). (1) scripts/gpu/recompute_default.py: which model
# and blocks the default finds on seven jobs, which blocks the check passes or
# refuses, an inference-only job (the search hook must go), a block with a
# forward hook and blocks that count their calls (both refused); (2) part 6
# of the framework proof (two-rank DDP on one GPU, gloo; its model now has
# eight repeated blocks, so the cut rank recomputes), with the uncut
# reference run (parameters must be bitwise equal).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call1.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 scripts/gpu/recompute_default.py 2>&1 | tee "$OUT/recompute-default.jsonl" | cut -c1-900
OUT=$OUT/proof python3 scripts/gpu/framework_proof.py --parts 6 2>&1 | tail -8
for f in "$OUT"/proof/part6-ddp*.json; do echo "== $f"; python3 -c "
import json,sys
d=json.load(open('$f'))
for r in d.get('ranks',[d]):
    print({k: r.get(k) for k in ('rank','ok','cut','params_sha256','error')}, [round(x,4) for x in r.get('losses',[])][::6])
    st=r.get('stats') or {}; print('   spilledBytes', st.get('spilledBytes'), 'devicePeakInUse', st.get('devicePeakInUse'), 'recompute', r.get('recompute'))
"; done
