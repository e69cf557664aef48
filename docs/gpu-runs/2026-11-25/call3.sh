#!/usr/bin/env bash
# Thirty-third session, call 3 (and call 6, run again with the code of the later commit that moves
# cold paths out of line): the futex instance lock (c692587) against the library before it,
# read as issue 11's replay target is: libvmem's ns/op over PyTorch's caching allocator in one
# process (torch-replay --vmem), vmm and cuda backends, every carried trace. The two libraries
# take turns, one process each per trace and backend, four rounds.
# Before: .carry/oldlib/src/libvmem.so.0 (build-gpu of main before c692587, carried).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
# Run from the repository root: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25/call3.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
    for b in .carry/oldlib build-gpu; do
        name=$([ "$b" = build-gpu ] && echo new || echo old)
        BUILD=$b OUT="$OUT/r$r-$name" TORCH_REUSE=1 BACKENDS="torch+vmm torch+cuda" ROUNDS=1 \
            REPEAT=11 VAR=- VALUES=default bash scripts/gpu/replay-alternate.sh > "$OUT/r$r-$name.log" 2>&1 ||
            echo "round $r $name: exit $?"
    done
done
python3 - "$OUT" <<'PY'
import collections, glob, json, os, statistics, sys
ratios = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "r*-*/replay-alternate.jsonl")):
    which = f.split(os.sep)[-2].split("-")[1]
    for line in open(f):
        run = json.loads(line)["run"]
        if run.get("paired_ratio") and run["backend"].endswith("(+torch)"):
            ratios[(run["trace"], run["backend"].split("(")[0], which)].append(run["paired_ratio"])
print("%-24s %-5s %22s %22s %7s" % ("trace", "back", "old: median (lo-hi)", "new: median (lo-hi)", "new/old"))
for t, b in sorted({(t, b) for t, b, _ in ratios}):
    o, n = ratios.get((t, b, "old"), []), ratios.get((t, b, "new"), [])
    if not o or not n:
        continue
    mo, mn = statistics.median(o), statistics.median(n)
    print("%-24s %-5s %8.3f (%.3f-%.3f) %8.3f (%.3f-%.3f) %7.3f" % (t, b, mo, min(o), max(o), mn, min(n), max(n), mn / mo))
PY
