#!/usr/bin/env python3
"""Issue 11's replay target read for several libraries run in turn: libvmem's
ns/op over PyTorch's in one torch-replay --vmem process (paired_ratio), per
trace, backend and library, from scripts/gpu/replay-alternate.sh's output
directories OUT/r<round>-<library>/replay-alternate.jsonl.

    replay_libs_summary.py OUT LIB ...

Prints, per trace and backend, each library's median over its rounds (lowest
and highest, count), and per library the pairs whose median is above 0.2."""
import collections
import glob
import json
import os
import statistics
import sys


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out, libs = argv[1], argv[2:]
    ratios = collections.defaultdict(list)
    for f in glob.glob(os.path.join(out, "r*-*/replay-alternate.jsonl")):
        which = f.split(os.sep)[-2].split("-", 1)[1]
        with open(f) as fh:
            for line in fh:
                run = json.loads(line)["run"]
                if run.get("paired_ratio") and run["backend"].endswith("(+torch)"):
                    ratios[(run["trace"], run["backend"].split("(")[0], which)].append(
                        run["paired_ratio"])
    print("%-24s %-5s %s" % ("trace", "back", "  ".join("%-22s" % lib for lib in libs)))
    over = collections.Counter()
    for t, b in sorted({(t, b) for t, b, _ in ratios}):
        cells = []
        for lib in libs:
            v = ratios.get((t, b, lib), [])
            if v:
                m = statistics.median(v)
                over[lib] += m > 0.2
                cells.append("%.3f (%.3f-%.3f) %d" % (m, min(v), max(v), len(v)))
            else:
                cells.append("-")
        print("%-24s %-5s %s" % (t, b, "  ".join("%-22s" % c for c in cells)))
    print("pairs with a median above 0.2:", dict(over))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
