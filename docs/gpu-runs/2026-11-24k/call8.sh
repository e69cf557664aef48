#!/bin/bash
# call 8 (twenty-sixth session, review): release_probe.py after it took the offload's own
# HostPool._pageable and pin_probe's helpers; cut-bench's rusage read right after the step's time.
R=$OUT; mkdir -p /tmp/w/c8
cd "$(dirname "$0")/.."
timeout 120 python3 scripts/gpu/release_probe.py 2 32 2>&1 | grep -v Warning | tee /tmp/w/c8/release-probe.log
echo "[probe rc=${PIPESTATUS[0]}]"
CUT_JOBS=resnet50 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=3 CUT_STEPS=3 CUT_RAISED=2 \
  OUT=/tmp/w/c8/cb timeout 200 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c8/cb.log 2>&1
echo "[cut-bench rc=$?]"
mkdir -p /tmp/w/c8/x && tar xzf /tmp/w/c8/cb/results.tgz -C /tmp/w/c8/x 2>/dev/null
python3 - <<'PY'
import json, glob
for f in glob.glob("/tmp/w/c8/x/cut-bench.sh.out/cut-resnet50*.json"):
    for s in json.load(open(f))["steps"]:
        print(s["phase"], s["k"], "%.1f ms user %.1f sys %.1f minflt %d" % (s["ms"], s["user_ms"], s["sys_ms"], s["minflt"]))
PY
cd /tmp/w && tar czf $R/o.tgz c8/release-probe.log
