#!/bin/bash
# call 5 (twenty-sixth session): pinning anonymous mappings against PyTorch CPU tensors (release_probe's
# first part), and in cut-bench: buffers from PyTorch's CPU tensors with malloc_trim after the release
# (CUT_OFFLOAD_ANON=0 CUT_OFFLOAD_TRIM=1), anonymous mappings (the new default), and the way before
# (CUT_OFFLOAD_ANON=0), one process each, BERT and GPT-2.
R=$OUT; mkdir -p /tmp/w/c5
cd "$(dirname "$0")/.."
timeout 170 python3 scripts/gpu/release_probe.py 10 32 > /tmp/w/c5/release-probe.log 2>&1; echo "[probe rc=$?]"
grep -v Warning /tmp/w/c5/release-probe.log
for jw in bert:trim gpt2:trim bert:anon gpt2:anon bert:heap gpt2:heap; do
  j=${jw%:*}; w=${jw#*:}
  case $w in trim) export CUT_OFFLOAD_ANON=0 CUT_OFFLOAD_TRIM=1;; anon) export CUT_OFFLOAD_ANON= CUT_OFFLOAD_TRIM=;; heap) export CUT_OFFLOAD_ANON=0 CUT_OFFLOAD_TRIM=;; esac
  CUT_JOBS=$j CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=6 CUT_RAISED=5 \
    OUT=/tmp/w/c5/$j-$w timeout 110 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c5/$j-$w.log 2>&1
  echo "[$j $w rc=$?]"
  tar xzf /tmp/w/c5/$j-$w/results.tgz -C /tmp/w/c5/$j-$w ./cut-bench.sh.log ./cut-bench.sh.out 2>/dev/null; rm -f /tmp/w/c5/$j-$w/results.tgz
  python3 - "$j-$w" <<'PY'
import json, sys, glob
j = sys.argv[1]
f = [x for x in glob.glob("/tmp/w/c5/%s/cut-bench.sh.out/cut-*.json" % j) if not x.endswith("cut-bench.json")][0]
for s in json.load(open(f))["steps"]:
    if s["k"] >= 2 or s["phase"] != "full":
        o = s.get("offload") or {}
        print(j, s["phase"], s["k"], "%.1f ms (fwd %.1f bwd %.1f cpu %.1f)" % (s["ms"], s["fwd_ms"], s["bwd_ms"], s["cpu_ms"]),
              "user %.0f sys %.0f minflt %dk" % (s["user_ms"], s["sys_ms"], s["minflt"] // 1000),
              "new pinned %.2f GB; clear %.1f ms, %.2f GB" % ((o.get("host_pinned_new") or 0) / 1e9, 1e3 * (o.get("clear_s") or 0), (o.get("cleared") or 0) / 1e9))
PY
done
cd /tmp/w && tar czf $R/o.tgz c5
