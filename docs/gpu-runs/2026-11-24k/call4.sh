#!/bin/bash
# call 4 (twenty-sixth session): the host buffers as anonymous mappings of their own (HostPool.anon,
# the new default): offload-check (bitwise equal losses and gradients), then BERT and GPT-2 twice
# and ViT once, 5 steps per raise, with the process's system time and page faults per step.
R=$OUT; mkdir -p /tmp/w/c4
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=/tmp/w/c4/chk timeout 150 bash scripts/gpu-run.sh device scripts/gpu/offload-check.sh > /tmp/w/c4/chk.log 2>&1
echo "[check rc=$?]"
tar xzOf /tmp/w/c4/chk/results.tgz ./offload-check.sh.log > /tmp/w/c4/chk-inner.log 2>/dev/null
grep -E 'PASS|FAIL' /tmp/w/c4/chk-inner.log | tail -12
for jw in bert:1 gpt2:1 vit:1 bert:2 gpt2:2; do
  j=${jw%:*}; w=${jw#*:}
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=6 CUT_RAISED=5 \
    OUT=/tmp/w/c4/$j-$w timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c4/$j-$w.log 2>&1
  echo "[$j $w rc=$?]"
  tar xzf /tmp/w/c4/$j-$w/results.tgz -C /tmp/w/c4/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c4/$j-$w/results.tgz
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c4/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["phase"].startswith("raised") or s["k"] >= 2 or s["phase"].startswith("cut"):
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "user %.1f sys %.1f minflt %d" % (s["user_ms"], s["sys_ms"], s["minflt"]),
              "new pinned %.2f GB; clear %.1f ms, %.2f GB" % ((o.get("host_pinned_new") or 0) / 1e9, 1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c4
