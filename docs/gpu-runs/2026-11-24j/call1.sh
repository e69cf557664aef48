#!/bin/bash
# call 1 (twenty-fifth session): the offload's hooks pushed only while they may act (HookSwitch).
# offload-check (offload on/off, a CUDA graph captured while cut) and five offload-autograd cases
# (compile, retain_graph, inplace, checkpoint, dropped_graph), with the hook cost.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c1/chk timeout 200 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c1/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c1/chk/results.tgz ./offload-check.sh.log > /tmp/w/c1/chk-inner.log 2>/dev/null
grep -E 'PASS|FAIL' /tmp/w/c1/chk-inner.log | tail -12
grep -oE '^(full|cut50|accum50|after50|raised) .*"hooks_on": (true|false)' /tmp/w/c1/chk-inner.log | sed -E 's/ \[.*"hooks_on"/ hooks_on/' | head -30
AUTOGRAD_CASES=compile,retain_graph,inplace,checkpoint,dropped_graph OUT=/tmp/w/c1/ag timeout 330 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c1/ag.log 2>&1
echo "[autograd rc=$?]"
tar xzOf /tmp/w/c1/ag/results.tgz ./offload-autograd.sh.log > /tmp/w/c1/ag-inner.log 2>/dev/null
grep -E '^(hook cost|[a-z_]+: |offload-autograd)' /tmp/w/c1/ag-inner.log | tail -8
cd /tmp/w && tar czf $R/o.tgz c1
