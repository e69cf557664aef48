#!/usr/bin/env bash
# Forty-fourth session, call 7: call 6 again after the step that re-matches more than 32 times goes naive
# cut step's record not kept, 62e45b9), gpt2var with naive and planned+offload and the uncut process, twice
# (two process triples), the planner's line per step (VMEM_LOG_LEVEL=debug); then GPT-2 (steps alike).
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call7.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
for rep in 1 2; do
env OUT=$ROOT/cut$rep VMEM_LOG_LEVEL=debug CUT_MODES=naive,planned+offload CUT_FULL=6 CUT_STEPS=16 CUT_RAISED=3 \
    CUT_JOBS=gpt2var timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut$rep-bench.log" 2>&1
echo "== cut-bench $rep rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut$rep-bench.log"
python3 - "$ROOT/cut$rep" <<'PY'
import json, os, random, sys
d = sys.argv[1]
runs = {}
for m in ("naive", "planned", "planned-offload", "uncut"):
    f = os.path.join(d, "cut-gpt2var-%s.json" % m)
    if os.path.exists(f):
        runs[m] = json.load(open(f))
unc = {s["i"]: s["ms"] for s in runs.get("uncut", {}).get("steps", [])}
naive = {s["i"]: s["host_placed"] + s["moved_to_host"] for s in runs.get("naive", {}).get("steps", [])}
for m, r in runs.items():
    if m == "uncut":
        continue
    print("== %s (ok %s)" % (m, r.get("ok")))
    for cut in ("cut75", "cut50"):
        st = [s for s in r["steps"] if s["phase"] == cut]
        for s in st:
            host = s["host_placed"] + s["moved_to_host"]
            print("%s %2d i %2d len %4d %8.1f ms  uncut %7.1f  x %.2f  host %6.2f GB  naive %6.2f GB  rule %s" % (
                cut, s["k"], s["i"], random.Random(s["i"]).choice((512, 768, 1024)), s["ms"],
                unc.get(s["i"], float("nan")), s["ms"] / unc[s["i"]] if s["i"] in unc else float("nan"),
                host / 1e9, naive.get(s["i"], float("nan")) / 1e9, s.get("rule")))
        for lo in (1, 10):
            part = [s for s in st if s["k"] >= lo and s["i"] in unc]
            if part:
                print("%s steps %d-%d: sum %.0f ms, uncut %.0f ms, x %.2f" % (
                    cut, lo, st[-1]["k"], sum(s["ms"] for s in part), sum(unc[s["i"]] for s in part),
                    sum(s["ms"] for s in part) / sum(unc[s["i"]] for s in part)))
        if m != "naive" and naive:
            part = [s for s in st if s["k"] >= 1 and s["i"] in naive]
            more = [s for s in part if s["host_placed"] + s["moved_to_host"] > naive[s["i"]]]
            print("%s steps 1-: host bytes %.2f GB against naive's %.2f; steps above naive: %d of %d %s" % (
                cut, sum(s["host_placed"] + s["moved_to_host"] for s in part) / 1e9,
                sum(naive[s["i"]] for s in part) / 1e9, len(more), len(part),
                [(s["k"], round((s["host_placed"] + s["moved_to_host"]) / 1e9, 2), round(naive[s["i"]] / 1e9, 2)) for s in more]))
PY
done
env OUT=$ROOT/fixed CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 CUT_RAISED=2 \
    CUT_JOBS=gpt2 timeout 150 bash scripts/gpu/cut-bench.sh > "$ROOT/fixed.log" 2>&1
echo "== fixed rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/fixed.log"
python3 - "$ROOT/fixed" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "cut-*-planned-offload.json"))):
    r = json.load(open(f))
    for cut in ("cut75", "cut50"):
        st = [s for s in r["steps"] if s["phase"] == cut]
        print(r["job"], cut, " ".join("%s:%.0f/%.2f" % ((s.get("rule") or "-")[:4], s["ms"],
              (s["host_placed"] + s["moved_to_host"]) / 1e9) for s in st))
PY
gzip -f "$ROOT"/*.log
