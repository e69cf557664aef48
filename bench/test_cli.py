#!/usr/bin/env python3
"""vmem-replay's command line as ../shared/DESIGN.md fixes it (meson test
'replay-cli'): the JSON keys, errors that name the line, exit statuses,
--find-min-limit, --timeline, and plot_timeline.py on the result.

    test_cli.py VMEM_REPLAY PLOT_TIMELINE_PY
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

import clitest
from clitest import check

REPLAY, PLOT = sys.argv[1], sys.argv[2]
KEYS = ["trace", "ops", "ns_per_op", "peak_live", "peak_reserved", "frag", "spilled_allocs",
        "peak_host", "failed_allocs", "min_limit", "min_limit_ratio"]


def run(*args):
    return clitest.run(REPLAY, *args)


def write(path, text):
    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


with tempfile.TemporaryDirectory() as d:
    lines = ['# {"workload": "cli-test"}']
    live = []
    for i in range(400):
        lines.append(f"a {i} {(i * 7919) % (24 << 20) + 1} 0 {1000 + i}")
        live.append(i)
        if len(live) > 30:
            lines.append(f"f {live.pop(0)} {1000 + i}")
    good = write(os.path.join(d, "good.txt.gz"), "\n".join(lines) + "\n")
    other = write(os.path.join(d, "other.txt.gz"), "a 1 1048576 0 1\nf 1 2\n")
    bad = write(os.path.join(d, "bad.txt.gz"), "a 1 100 0 1\na 2 100 0\n")
    unknown = write(os.path.join(d, "unknown.txt.gz"), "a 1 100 0 1\nf 9 2\n")

    rc, out, err = run("--repeat", "2", good, other)
    check(rc == 0, f"valid traces: exit {rc}: {err}")
    rows = [json.loads(l) for l in out.splitlines()]
    check(len(rows) == 2, "one JSON line per trace")
    for r in rows:
        for k in KEYS:
            check(k in r, f"key {k} in {r.get('trace')}")
    if rows:
        r = rows[0]
        check(r["trace"] == "good.txt.gz", "trace is the file's name")
        check(r["ops"] == len(lines) - 1, "ops counts allocations and frees")
        check(r["failed_allocs"] == 0 and r["spilled_allocs"] == 0, "no failure without a limit")
        check(r["peak_reserved"] >= r["peak_live"] > 0, "peak_reserved >= peak_live")
        check(abs(r["frag"] - r["peak_reserved"] / r["peak_live"]) < 1e-3, "frag is the ratio")
        check(r["min_limit"] is None and r["min_limit_ratio"] is None, "no search by default")

    rc, out, err = run("--backend", "sim-vmm", "--limit", "64M", "--host-limit", "1G",
                       "--repeat", "1", good)
    check(rc == 0, f"sim-vmm with limits: exit {rc}: {err}")
    r = json.loads(out)
    check(r["peak_reserved"] <= 64 << 20, "the limit caps what the device holds")
    check(r["spilled_allocs"] > 0 and r["peak_host"] > 0, "over the limit, blocks spill to host")
    check(r["failed_allocs"] == 0, "host fallback serves them")

    rc, out, err = run("--find-min-limit", "--repeat", "1", "--timeline",
                       os.path.join(d, "tl.csv"), good)
    check(rc == 0, f"--find-min-limit: exit {rc}: {err}")
    r = json.loads(out)
    check(r["min_limit"] % (2 << 20) == 0, "min_limit in 2 MiB steps")
    check(r["min_limit"] >= r["peak_live"], "min_limit at least peak_live")
    check(abs(r["min_limit_ratio"] - r["min_limit"] / r["peak_live"]) < 1e-3, "ratio")
    rc2, out2, _ = run("--limit", str(r["min_limit"]), "--repeat", "1", good)
    check(rc2 == 0 and json.loads(out2)["spilled_allocs"] == 0, "no spill at min_limit")
    rc2, out2, _ = run("--limit", str(r["min_limit"] - (2 << 20)), "--repeat", "1", good)
    check(rc2 == 0 and json.loads(out2)["spilled_allocs"] > 0, "spill 2 MiB below min_limit")

    with open(os.path.join(d, "tl.csv")) as f:
        tl = f.read().splitlines()
    check(tl[0] == "event,time_us,live_bytes,device_held,limit,host_held", "timeline header")
    check(len(tl) > 10 and all(len(x.split(",")) == 6 for x in tl[1:]), "timeline rows")
    p = subprocess.run([sys.executable, PLOT, os.path.join(d, "tl.csv"), "-o",
                        os.path.join(d, "tl.svg")], capture_output=True, text=True)
    check(p.returncode == 0, f"plot_timeline: {p.stderr}")
    with open(os.path.join(d, "tl.svg")) as f:
        svg = f.read()
    check(svg.startswith("<svg") and svg.count("<path") >= 2, "an SVG with lines")

    rc, out, err = run(bad)
    check(rc == 1 and "bad.txt.gz:2:" in err and out == "", f"malformed: exit {rc}: {err}")
    rc, out, err = run(unknown)
    check(rc == 1 and "unknown.txt.gz:2: free of unknown block 9" in err, f"unknown id: {err}")
    rc, out, err = run("--repeat", "1", bad, other)
    check(rc == 1 and len(out.splitlines()) == 1, "a bad trace does not stop the others")
    rc, out, err = run("--backend", "nope", good)
    check(rc == 2, "unknown backend: usage error")
    rc, out, err = run("--limit", "12Q", good)
    check(rc == 2, "bad size: usage error")
    rc, out, err = run()
    check(rc == 2, "no trace: usage error")
    rc, out, err = run("--backend", "cuda", "--repeat", "1", other)
    check(rc in (0, 1), f"cuda backend: exit {rc} (0 with a GPU, 1 without), never a crash")

    # issue 16: hostile input gets a clear error, never an obscure one
    rc, out, err = run("--limit", "17T", "--repeat", "1", other)
    check(rc == 2 and "--limit" in err and "16 TiB" in err and "invalid argument" not in err,
          f"--limit above the simulated device's range: exit {rc}: {err}")
    for cap in ("17T", "1M", "0"):
        rc, out, err = run("--sim-capacity", cap, "--repeat", "1", other)
        check(rc == 2 and "--sim-capacity" in err and "2 MiB to 16 TiB" in err,
              f"--sim-capacity {cap}: exit {rc}: {err}")
    rc, out, err = run("--limit", "16T", "--repeat", "1", other)
    check(rc == 0, f"--limit 16T is in range: exit {rc}: {err}")
    rc, out, err = run("--max-events", "100", "--repeat", "1", good)
    check(rc == 1 and "good.txt.gz:" in err and "more than 100 events" in err
          and "--max-events" in err, f"--max-events bound: exit {rc}: {err}")
    rc, out, err = run("--max-events", "0", "--repeat", "1", good)
    check(rc == 0, f"--max-events 0 (no bound): exit {rc}: {err}")
    rc, out, err = run("--max-events", "lots", good)
    check(rc == 2, f"--max-events lots: usage error, exit {rc}")
    nul = os.path.join(d, "nul.txt.gz")
    with gzip.open(nul, "wb") as f:
        f.write(b"a 1 100 0 1\nf 1\x00 junk 2\n")
    rc, out, err = run(nul)
    check(rc == 1 and "nul.txt.gz:2: NUL byte" in err, f"NUL byte in a line: exit {rc}: {err}")

clitest.finish("replay-cli")
