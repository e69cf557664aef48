#!/bin/bash
# call 8 (twenty-fifth session): the final offload (hooks switched, bulk skip judged at the step
# end, learn_order off) through offload-check and all nine offload-autograd cases.
R=$OUT; mkdir -p /tmp/w/c8
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c8/chk timeout 150 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c8/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c8/chk/results.tgz ./offload-check.sh.log > /tmp/w/c8/chk-inner.log 2>/dev/null
grep -E 'PASS|FAIL' /tmp/w/c8/chk-inner.log | tail -12
HOOK_COST=0 OUT=/tmp/w/c8/ag timeout 420 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c8/ag.log 2>&1
echo "[autograd rc=$?]"
mkdir -p /tmp/w/c8/agx && tar xzf /tmp/w/c8/ag/results.tgz -C /tmp/w/c8/agx 2>/dev/null
grep -E '^([a-z_]+: |offload-autograd)' /tmp/w/c8/agx/offload-autograd.sh.log | tail -10
for c in compile dropped_graph; do for m in 0 1; do
  echo "$c-$m: $(grep -E ' (cut50) ' /tmp/w/c8/agx/offload-autograd.sh.out/$c-$m.log | sed -E 's/.* ([0-9.]+ ms) .*out ([0-9]+ MiB) \(([0-9]+) MiB.*/\1 \2 bulk \3;/' | tr '\n' ' ')"
done; done
cd /tmp/w && tar czf $R/o.tgz c8
