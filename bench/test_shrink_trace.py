#!/usr/bin/env python3
"""vmem-shrink-trace on sim-vmm (meson test 'shrink-trace'): on a synthetic
fragmented trace every cut applies at once and gives back exactly the free
granules (held - live footprint), the summary adds up, and bad input gives
the documented exit statuses.

    test_shrink_trace.py VMEM_SHRINK_TRACE
"""
import gzip
import json
import os
import random
import sys
import tempfile

import clitest
from clitest import check

TOOL = sys.argv[1]


def run(*args):
    return clitest.run(TOOL, *args)


with tempfile.TemporaryDirectory() as d:
    # Rounds of 200 blocks of 1-8 MiB, two thirds of what is live freed at
    # random after each round: holes between live blocks all over the arena.
    random.seed(7)
    lines, live, nid, t = ['# {"workload": "shrink-test"}'], [], 0, 0
    for _ in range(6):
        for _ in range(200):
            size = random.choice([1, 2, 3, 5, 8]) * (1 << 20) + random.randint(0, 4096)
            lines.append("a %d %d 0 %d" % (nid, size, t))
            live.append(nid)
            nid, t = nid + 1, t + 1
        random.shuffle(live)
        k = len(live) * 2 // 3
        for i in live[:k]:
            lines.append("f %d %d" % (i, t))
            t += 1
        live = live[k:]
    trace = os.path.join(d, "frag.txt.gz")
    with gzip.open(trace, "wt") as f:
        f.write("\n".join(lines) + "\n")

    rc, out, err = run("--backend", "sim-vmm", "--points", "4", trace)
    check(rc == 0, "exit 0 on sim-vmm (got %d: %s)" % (rc, err))
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    points = [r for r in rows if "point" in r]
    total = [r for r in rows if "trace" in r]
    check(len(points) == 4, "4 points (got %d)" % len(points))
    check(len(total) == 1, "one summary line")
    for r in points:
        check(r["released"] == r["held"] - r["live_footprint"],
              "point %d gives back every free granule: %d != %d - %d" % (
                  r["point"], r["released"], r["held"], r["live_footprint"]))
        check(r["holes"] > 1 and r["cut_64mib"] > 0,
              "point %d: the trace is fragmented (holes %d, cut %d)" % (
                  r["point"], r["holes"], r["cut_64mib"]))
        check(r["free_granules"] * (2 << 20) == r["released"],
              "point %d: free granules %d x 2 MiB == released %d" % (
                  r["point"], r["free_granules"], r["released"]))
    if total:
        s = total[0]
        check(s["failures"] == 0 and s["failed_allocs"] == 0, "no failures: %s" % s)
        check(s["released"] == sum(r["released"] for r in points), "summary adds up")
        check(s["points"] == 4 and s["backend"] == "sim-vmm", "summary names the run")

    # Bad input.
    check(run(trace)[0] == 0, "sim-vmm is the default backend")
    check(run("--points", "0", trace)[0] == 2, "--points 0 is a usage error")
    check(run("--points", "5x", trace)[0] == 2, "--points 5x is a usage error (it read as 5)")
    check(run("--backend", "sim", trace)[0] == 2, "--backend sim is refused (no granules)")
    check(run()[0] == 2, "no trace is a usage error")
    bad = os.path.join(d, "bad.txt.gz")
    with gzip.open(bad, "wt") as f:
        f.write("a 1 x\n")
    rc, _, err = run(bad)
    check(rc == 2 and "bad.txt.gz:1" in err, "a malformed trace names its line (%d, %s)" % (rc, err))
    rc, _, _ = run("--backend", "vmm", trace)
    check(rc in (0, 77), "vmm: 0 on a GPU, 77 without one (got %d)" % rc)

clitest.finish("shrink-trace")
