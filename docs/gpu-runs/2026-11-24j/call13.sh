#!/bin/bash
# call 13 (twenty-fifth session): the steps after a raise; how long the offload's pool.clear
# (unpinning and freeing its host buffers) takes at each step end.  GPT-2 and BERT.
R=$OUT; mkdir -p /tmp/w/c13
cd "$(dirname "$0")/.."
for j in gpt2 bert; do
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=6 CUT_RAISED=4 \
    OUT=/tmp/w/c13/$j timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c13/$j.log 2>&1
  echo "[$j rc=$?]"
  tar xzf /tmp/w/c13/$j/results.tgz -C /tmp/w/c13/$j ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c13/$j/results.tgz
  python3 - "$j" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c13/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised") or s["phase"].startswith("cut") and s["k"] >= 4:
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "clear %.1f ms, %.2f GB" % (1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c13
