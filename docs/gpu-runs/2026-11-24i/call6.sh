#!/bin/bash
# call 6 (twenty-fourth session, review): offload-check and two offload-autograd cases after
# their phase loop became one generator (offload_check.cut_steps) and the record's weak
# reference moved into its constructor.
R=$OUT; mkdir -p /tmp/w/c6
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c6/chk timeout 200 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c6/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c6/chk/results.tgz ./offload-check.sh.log > /tmp/w/c6/chk-inner.log 2>/dev/null
grep -E 'PASS|FAIL' /tmp/w/c6/chk-inner.log | tail -12
HOOK_COST=0 AUTOGRAD_CASES=retain_graph,inplace OUT=/tmp/w/c6/ag timeout 200 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c6/ag.log 2>&1
echo "[autograd rc=$?]"
tar xzOf /tmp/w/c6/ag/results.tgz ./offload-autograd.sh.log > /tmp/w/c6/ag-inner.log 2>/dev/null
grep -E '^([a-z_]+: |offload-autograd)' /tmp/w/c6/ag-inner.log | tail -5
cd /tmp/w && tar czf $R/o.tgz c6
