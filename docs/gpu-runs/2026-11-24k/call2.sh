#!/bin/bash
# call 2 (twenty-sixth session): the slow steps after the raise from 50%, profiled (CPU and CUDA
# activity: steps 1 and 3 after the raise; cProfile of the same in another process), and a second
# process each of GPT-2 and BERT with the host pool kept.
R=$OUT; mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
for jw in gpt2:cpu gpt2:py gpt2:keep bert:keep bert:cpu; do
  j=${jw%:*}; w=${jw#*:}
  case $w in
    keep) export CUT_OFFLOAD_KEEP_POOL=1 CUT_PROFILE= CUT_PROFILE_AT=;;
    cpu) export CUT_OFFLOAD_KEEP_POOL= CUT_PROFILE=cpu CUT_PROFILE_AT=raised50:1,raised50:2,raised50:3;;
    py) export CUT_OFFLOAD_KEEP_POOL= CUT_PROFILE=py CUT_PROFILE_AT=raised50:1,raised50:3;;
  esac
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=6 CUT_RAISED=5 \
    OUT=/tmp/w/c2/$j-$w timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2/$j-$w.log 2>&1
  echo "[$j $w rc=$?]"
  tar xzf /tmp/w/c2/$j-$w/results.tgz -C /tmp/w/c2/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c2/$j-$w/results.tgz
  rm -f /tmp/w/c2/$j-$w/cut-bench.sh.out/trace-*.json
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c2/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised") or (s["phase"] == "full" and s["k"] > 0):
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "maps %d unmaps %d gc %d" % (s["region_maps"], s["region_unmaps"], s["gc_runs"]),
              "clear %.1f ms, %.2f GB" % (1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
  grep -E -A3 '^stream gaps|^CPU calls' /tmp/w/c2/$j-$w/cut-bench.sh.log | cut -c1-1800 | head -60
  grep -E -A28 '^python profile' /tmp/w/c2/$j-$w/cut-bench.sh.log | cut -c1-200 | head -70
done
cd /tmp/w && tar czf $R/o.tgz c2
