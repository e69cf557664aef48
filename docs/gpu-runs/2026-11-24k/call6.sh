#!/bin/bash
# call 6 (twenty-sixth session): the five jobs against issue 11's targets with the heap trimmed at the
# cut's end (the new default), the protocol of the twenty-fifth session's call 7 with 6 steps per raise.
# Rule, written before the run: the trim stays the default if no step from the second after either raise,
# in any job, has more than 20 ms of system time (the deferred release it removes took 25-200 ms).
R=$OUT; mkdir -p /tmp/w/c6
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUT_JOBS=gpt2,resnet50,bert,vit,convnext CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 \
  OUT=/tmp/w/c6/cb timeout 575 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c6/cb.log 2>&1
echo "[cut-bench rc=$?]"
mkdir -p /tmp/w/c6/x && tar xzf /tmp/w/c6/cb/results.tgz -C /tmp/w/c6/x 2>/dev/null
cp /tmp/w/c6/x/cut-bench.sh.log /tmp/w/c6/cb-inner.log
sed -n '/^job       mode     rule/,$p' /tmp/w/c6/cb-inner.log | head -60
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/w/c6/x/cut-bench.sh.out/cut-*.json")):
    if f.endswith("cut-bench.json"): continue
    st = json.load(open(f))["steps"]
    for p in ("raised75", "raised50"):
        rs = [s for s in st if s["phase"] == p]
        print(f.split("/")[-1], p, " ".join("%.1f(sys %.0f)" % (s["ms"], s["sys_ms"]) for s in rs))
PY
cd /tmp/w && tar czf $R/o.tgz c6/cb.log c6/cb-inner.log
