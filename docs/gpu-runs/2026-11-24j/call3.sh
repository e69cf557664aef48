#!/bin/bash
# call 3 (twenty-fifth session): bulk skip (records a backward consumes in bulk are skipped).
# (a) offload-autograd: compile (the whole model compiled), lstm and custom_function (nodes
#     that save several tensors), retain_graph;
# (b) GPT-2 with torch.compile, cut: without the offload (planned) and with it.
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
HOOK_COST=0 AUTOGRAD_CASES=compile,lstm,custom_function,retain_graph OUT=/tmp/w/c3/ag timeout 220 bash scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh > /tmp/w/c3/ag.log 2>&1
echo "[autograd rc=$?]"
mkdir -p /tmp/w/c3/agx && tar xzf /tmp/w/c3/ag/results.tgz -C /tmp/w/c3/agx 2>/dev/null
grep -E '^([a-z_]+: |offload-autograd)' /tmp/w/c3/agx/offload-autograd.sh.log | tail -6
for c in compile lstm custom_function; do for m in 0 1; do
  echo "$c-$m: $(grep -E ' (cut50) ' /tmp/w/c3/agx/offload-autograd.sh.out/$c-$m.log | sed -E 's/.* ([0-9.]+ ms) .*out ([0-9]+ MiB) \(([0-9]+) MiB.*/\1 \2 bulk \3;/' | tr '\n' ' ')"
done; done
for m in planned+offload planned; do
  CUT_COMPILE=1 CUT_JOBS=gpt2 CUT_MODES=$m CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=8 CUT_RAISED=1 \
    OUT=/tmp/w/c3/gpt2c-$m timeout 185 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/gpt2c-$m.log 2>&1
  echo "[gpt2 compiled $m rc=$?]"
  tar xzOf /tmp/w/c3/gpt2c-$m/results.tgz ./cut-bench.sh.log > /tmp/w/c3/gpt2c-$m-inner.log 2>/dev/null
  grep -E '^gpt2 +planned(\+offload)? +(full|cut75|cut50) ' /tmp/w/c3/gpt2c-$m-inner.log | awk '{print $3, $4, $5, $6}' | tr '\n' ';'; echo
  grep -E 'offload: ' /tmp/w/c3/gpt2c-$m-inner.log | sed -E 's/.*offload: ([0-9.]+ GB out).*, ([0-9.]+ GB late).*skipped \(([0-9.]+ GB) found.*/\1 \2 bulk \3/' | tr '\n' ';'; echo
  grep -E 'error|Error' /tmp/w/c3/gpt2c-$m-inner.log | head -3
done
cd /tmp/w && tar czf $R/o.tgz c3
