#!/bin/bash
# call 14 (twenty-fifth session): the host buffers let go on a thread of their own (default) or in the step end (CUT_OFFLOAD_BACKGROUND=0)
# GPT-2 and BERT, one process per way: off (0), on (1), off, on.
# Rule, written before the run: the thread stays the default if, for both jobs and both raises,
# the first step after the raise is faster with it and the median of steps 1-3 after it is at
# most 3% slower.
R=$OUT; mkdir -p /tmp/w/c14
cd "$(dirname "$0")/.."
for jw in gpt2:0 gpt2:1 bert:0 bert:1; do
  j=${jw%:*}; w=${jw#*:}
  CUT_OFFLOAD_BACKGROUND=$w CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=6 CUT_RAISED=4 \
    OUT=/tmp/w/c14/$j-$w timeout 100 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c14/$j-$w.log 2>&1
  echo "[$j background=$w rc=$?]"
  tar xzf /tmp/w/c14/$j-$w/results.tgz -C /tmp/w/c14/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c14/$j-$w/results.tgz
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c14/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised"):
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "clear %.1f ms, %.2f GB" % (1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c14
