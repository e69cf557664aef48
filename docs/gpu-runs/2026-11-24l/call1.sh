#!/bin/bash
# call 1 (twenty-seventh session): the steps after the raise from 50% still run 10-30% above
# the full step on BERT, in the CPU's time to queue the step. Bisect: with the offload (cProfile
# of full:7, raised75:3, raised50:3), without the offload (placement alone), and the torch
# profiler's CPU view of full:7 and raised50:3.
R=$OUT; mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # name, env...
  local n=$1; shift
  env "$@" CUT_JOBS=bert CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 OUT=/tmp/w/c1/$n \
    timeout 170 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c1/$n/x && tar xzf /tmp/w/c1/$n/results.tgz -C /tmp/w/c1/$n/x 2>/dev/null
  cp /tmp/w/c1/$n/x/cut-bench.sh.log /tmp/w/c1/$n.log
  python3 - /tmp/w/c1/$n <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/x/cut-bench.sh.out/cut-*.json")):
    if f.endswith("cut-bench.json"): continue
    st = json.load(open(f))["steps"]
    for p in ("full", "raised75", "raised50"):
        rs = [s for s in st if s["phase"] == p]
        if rs:
            print(f.split("/")[-1], p, " ".join("%.1f(cpu %.0f)" % (s["ms"], s["cpu_ms"]) for s in rs[:12]))
PY
}
run py CUT_MODES=planned+offload CUT_PROFILE=py CUT_PROFILE_AT=full:7,raised75:3,raised50:3
run plain CUT_MODES=planned
run cpu CUT_MODES=planned+offload CUT_PROFILE=cpu CUT_PROFILE_AT=full:7,raised50:3
cd /tmp/w && tar czf $R/o.tgz c1/*.log
