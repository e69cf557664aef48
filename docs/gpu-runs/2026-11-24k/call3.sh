#!/bin/bash
# call 3 (twenty-sixth session): the steps after a raise with the process's page faults, CPU time
# (user, system) and context switches per step; and with glibc's mmap threshold fixed at 1 MiB
# (MALLOC_MMAP_THRESHOLD_, which also stops its dynamic raise), a diagnostic of the heap's part.
R=$OUT; mkdir -p /tmp/w/c3
cd "$(dirname "$0")/.."
for jw in bert:default gpt2:default bert:mmap1m gpt2:mmap1m bert:default2; do
  j=${jw%:*}; w=${jw#*:}
  case $w in mmap1m) export MALLOC_MMAP_THRESHOLD_=1048576;; *) unset MALLOC_MMAP_THRESHOLD_;; esac
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=6 CUT_RAISED=5 \
    OUT=/tmp/w/c3/$j-$w timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c3/$j-$w.log 2>&1
  echo "[$j $w rc=$?]"
  tar xzf /tmp/w/c3/$j-$w/results.tgz -C /tmp/w/c3/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c3/$j-$w/results.tgz
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c3/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised") or s["k"] >= 2:
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "user %.1f sys %.1f minflt %d majflt %d csw %d/%d" % (s["user_ms"], s["sys_ms"], s["minflt"], s["majflt"], s["nvcsw"], s["nivcsw"]),
              "clear %.1f ms, %.2f GB" % (1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c3
