#!/usr/bin/env bash
# Forty-fourth session, call 1: four builds of the arena in turn, read as issue 11's replay
# target is (libvmem's ns/op over PyTorch's in one torch-replay --vmem process, vmm and cuda,
# every carried trace): v-base (HEAD 10b8e3e), v-ded (free chunks of dedicated regions in free
# lists of their own, docs/gpu-runs/2026-11-25k/dedicated-lists-trial.patch), v-slot (the live
# map's keys and values side by side in one array of slots), v-both. Libraries in
# .carry/v-*/src/libvmem.so.0, each with build-gpu/carry-cuda beside it. Rounds interleave the
# builds so that a cut-off run still compares them all.
# Carry: build-gpu/src build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25l/call1.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LIBS=${LIBS:-v-base v-ded v-slot v-both}
ROUNDS=${ROUNDS_OUTER:-4}
summary() {
python3 - "$OUT" $LIBS <<'PY'
import collections, glob, json, os, statistics, sys
out, libs = sys.argv[1], sys.argv[2:]
ratios = collections.defaultdict(list)
for f in glob.glob(os.path.join(out, "r*-*/replay-alternate.jsonl")):
    which = f.split(os.sep)[-2].split("-", 1)[1]
    for line in open(f):
        run = json.loads(line)["run"]
        if run.get("paired_ratio") and run["backend"].endswith("(+torch)"):
            ratios[(run["trace"], run["backend"].split("(")[0], which)].append(run["paired_ratio"])
print("%-24s %-5s %s" % ("trace", "back", "  ".join("%-22s" % l for l in libs)))
over = collections.Counter()
for t, b in sorted({(t, b) for t, b, _ in ratios}):
    cells = []
    for l in libs:
        v = ratios.get((t, b, l), [])
        if v:
            m = statistics.median(v)
            over[l] += m > 0.2
            cells.append("%.3f (%.3f-%.3f) %d" % (m, min(v), max(v), len(v)))
        else:
            cells.append("-")
    print("%-24s %-5s %s" % (t, b, "  ".join("%-22s" % c for c in cells)))
print("pairs with a median above 0.2:", dict(over))
PY
}
for r in $(seq "$ROUNDS"); do
    for name in $LIBS; do
        BUILD=.carry/$name OUT="$OUT/r$r-$name" TORCH_REUSE=1 BACKENDS="torch+vmm torch+cuda" ROUNDS=1 \
            REPEAT=11 VAR=- VALUES=default bash scripts/gpu/replay-alternate.sh > "$OUT/r$r-$name.log" 2>&1 ||
            echo "round $r $name: exit $?"
    done
    echo "== after round $r ($SECONDS s)"
    summary
done
