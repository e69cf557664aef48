#!/usr/bin/env bash
# Forty-second session, call 3: issue 11's replay target (libvmem's ns/op over
# PyTorch's caching allocator in one process, torch-replay --vmem) on an H200
# with the library as it is (C code unchanged since 56892a9), every carried
# trace, vmm and cuda, four rounds of one process per trace and backend.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25j/call3.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
    BUILD=build-gpu OUT="$OUT/r$r" TORCH_REUSE=1 \
        BACKENDS="torch+vmm torch+cuda" ROUNDS=1 REPEAT=11 VAR=- VALUES=default \
        bash scripts/gpu/replay-alternate.sh > "$OUT/r$r.log" 2>&1 || echo "round $r: exit $?"
done
python3 - "$OUT" <<'PY'
import collections, glob, json, os, statistics, sys
ratios = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "r*/replay-alternate.jsonl")):
    for line in open(f):
        run = json.loads(line)["run"]
        if run.get("paired_ratio") and run["backend"].endswith("(+torch)"):
            ratios[(run["trace"], run["backend"].split("(")[0])].append(run["paired_ratio"])
print("%-24s %-5s %24s" % ("trace", "back", "median (lo-hi), n"))
over = 0
for (t, b), v in sorted(ratios.items()):
    m = statistics.median(v)
    over += m > 0.2
    print("%-24s %-5s %8.3f (%.3f-%.3f) %d" % (t, b, m, min(v), max(v), len(v)))
print("pairs with a median above 0.2: %d of %d" % (over, len(ratios)))
PY
