#!/usr/bin/env bash
# Thirty-third session, call 8 (run twice; the change is call8-chunk-dedicated-flag.patch, not
# kept): a free chunk carries its region's dedicated flag, so the best
# fit's walk past dedicated regions' chunks reads no region (cache misses on the GPU machine's
# CPU?), against the library without it (.carry/oldlib, the tree at 4a71f27). The cuda
# backend only, the four traces where it misses the replay target most; the libraries take
# turns, one process each per trace, six rounds.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4 5 6; do
    for b in .carry/oldlib build-gpu; do
        name=$([ "$b" = build-gpu ] && echo new || echo old)
        BUILD=$b OUT="$OUT/r$r-$name" TORCH_REUSE=1 TRACES=.carry/traces4 BACKENDS="torch+cuda" ROUNDS=1 \
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
            ratios[(run["trace"], which)].append(run["paired_ratio"])
for t in sorted({t for t, _ in ratios}):
    o, n = ratios.get((t, "old"), []), ratios.get((t, "new"), [])
    if o and n:
        mo, mn = statistics.median(o), statistics.median(n)
        print("%-24s old %.3f (%.3f-%.3f)  new %.3f (%.3f-%.3f)  new/old %.3f" % (t, mo, min(o), max(o), mn, min(n), max(n), mn / mo))
PY
