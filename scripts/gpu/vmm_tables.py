#!/usr/bin/env python3
"""The tables scripts/gpu/vmm-bench.sh prints, from the JSON lines its tools
wrote (one parser for all of them; lines that are not JSON are skipped):

    vmm_tables.py replay REPLAY.json ...   vmem-replay --find-min-limit rows
    vmm_tables.py shrink SHRINK.json       one vmem-shrink-trace row
    vmm_tables.py probe PROBE.json         vmm-driver-probe rows
"""
import json
import sys


def records(path):
    """The JSON objects among the lines of path (none if it is missing)."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue


def replay(paths):
    for path in paths:
        for r in records(path):
            ratio = r.get("min_limit_ratio")
            print("%-9s %-24s %9.1f %9.4f %10s %7s" % (
                r.get("backend", "?"), r.get("trace", "?"), r.get("ns_per_op", float("nan")),
                r.get("frag", float("nan")), "%.4f" % ratio if ratio is not None else "-",
                "ok" if ratio is not None and ratio <= 1.03 else "MISSED"))


def shrink(path):
    pts, tot = [], None
    for r in records(path):
        if "point" in r:
            pts.append(r)
        elif "trace" in r:
            tot = r
    big = max(pts, key=lambda r: r["released"]) if pts else None
    if tot and big:
        print("%-22s %3d %9.2f %9.1f %8.2f %10.2f %9.1f %6s" % (
            tot["trace"], tot["points"], tot["released"] / 2**30, tot["ms"], tot["ms_per_gib"],
            big["released"] / 2**30, big["ms"], "ok" if tot["max_ms"] < 100 else "MISSED"))


def probe(path):
    for r in records(path):
        if "call" in r:
            print("driver %-9s %-48s %7.2f us/call" % (r["phase"], r["call"], r["us_per_call"]))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("replay", "shrink", "probe"):
        sys.exit(__doc__)
    if sys.argv[1] == "replay":
        replay(sys.argv[2:])
    elif sys.argv[1] == "shrink":
        shrink(sys.argv[2])
    else:
        probe(sys.argv[2])
