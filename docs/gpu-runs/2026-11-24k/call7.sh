#!/bin/bash
# call 7 (twenty-sixth session): offload-check with the heap trimmed at the cut's end (the new default),
# and ConvNeXt and BERT again with an uncut process beside them (their steps after the raise from 50%
# ran 10-20% above their full steps in call 6 with no system time).
R=$OUT; mkdir -p /tmp/w/c7
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c7/chk timeout 150 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c7/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c7/chk/results.tgz ./offload-check.sh.log > /tmp/w/c7/chk-inner.log 2>/dev/null
grep -E 'PASS|FAIL' /tmp/w/c7/chk-inner.log | tail -12
CUT_JOBS=convnext,bert CUT_MODES=planned+offload CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=1 \
  OUT=/tmp/w/c7/cb timeout 400 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c7/cb.log 2>&1
echo "[cut-bench rc=$?]"
mkdir -p /tmp/w/c7/x && tar xzf /tmp/w/c7/cb/results.tgz -C /tmp/w/c7/x 2>/dev/null
cp /tmp/w/c7/x/cut-bench.sh.log /tmp/w/c7/cb-inner.log
sed -n '/^after each raise/,/^host bytes/p' /tmp/w/c7/cb-inner.log
sed -n '/^job       mode     rule/,/^$/p' /tmp/w/c7/cb-inner.log
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/w/c7/x/cut-bench.sh.out/cut-*.json")):
    if f.endswith("cut-bench.json"): continue
    st = json.load(open(f))["steps"]
    for p in ("full", "more", "raised75", "raised50"):
        rs = [s for s in st if s["phase"] == p]
        if rs:
            print(f.split("/")[-1], p, " ".join("%.1f(cpu %.0f sys %.0f)" % (s["ms"], s["cpu_ms"], s["sys_ms"]) for s in rs[:12]))
PY
cd /tmp/w && tar czf $R/o.tgz c7/chk-inner.log c7/cb-inner.log
