#!/bin/bash
# call 1 (twenty-sixth session): what slows the steps after a raise.
# 1. release_probe.py: plain PyTorch, 10 GB of registered host buffers let go, the steps after timed.
# 2. BERT and GPT-2 in cut-bench with 6 steps per raise: default; the host pool kept
#    (CUT_OFFLOAD_KEEP_POOL=1); BERT also with a second slept after each raise's first step.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
timeout 150 python3 scripts/gpu/release_probe.py 10 32 > /tmp/w/c1/release-probe.log 2>&1; echo "[probe rc=$?]"
cat /tmp/w/c1/release-probe.log | grep -v Warning
for jw in bert:default bert:keep bert:sleep gpt2:default gpt2:keep; do
  j=${jw%:*}; w=${jw#*:}
  case $w in keep) export CUT_OFFLOAD_KEEP_POOL=1 CUT_RAISED_SLEEP=;; sleep) export CUT_OFFLOAD_KEEP_POOL= CUT_RAISED_SLEEP=1;; *) export CUT_OFFLOAD_KEEP_POOL= CUT_RAISED_SLEEP=;; esac
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=6 CUT_RAISED=6 \
    OUT=/tmp/w/c1/$j-$w timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$j-$w.log 2>&1
  echo "[$j $w rc=$?]"
  tar xzf /tmp/w/c1/$j-$w/results.tgz -C /tmp/w/c1/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c1/$j-$w/results.tgz
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c1/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised") or (s["phase"] == "full" and s["k"] > 0):
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "maps %d unmaps %d gc %d" % (s["region_maps"], s["region_unmaps"], s["gc_runs"]),
              "clear %.1f ms, %.2f GB" % (1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c1
