"""vmem-replay on the real traces kept in the repository (tests/data/):
every trace replays, its counts and peak live bytes agree with an
independent reading of the file, and --find-min-limit finds a limit at or
above the peak live bytes.  Traces written by libvmem_trace (a "source" in
the header) are also checked against what the converter said: its peak live
bytes and blocks live at the end, and for record() its step boundaries (one
's' line per step() that has events after it).  No trace found is a failure.

    python3 bench/test_data.py VMEM_REPLAY TRACE_DIR
"""
import glob
import gzip
import json
import os
import subprocess
import sys

replay, folder = sys.argv[1], sys.argv[2]
traces = sorted(glob.glob(os.path.join(folder, "*.txt.gz")))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def read(path):
    header, allocs, frees, live, peak, sizes = None, 0, 0, 0, 0, {}
    marks, last_t = 0, 0
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                if header is None:
                    header = json.loads(line[1:])
                continue
            p = line.split()
            if p[0] == "s":
                marks += 1
                continue
            last_t = max(last_t, int(p[-1]))
            if p[0] == "a":
                allocs += 1
                sizes[p[1]] = int(p[2])
                live += int(p[2])
                peak = max(peak, live)
            elif p[0] == "f":
                frees += 1
                live -= sizes.pop(p[1])
    return header, allocs, frees, peak, marks, last_t


check(len(traces) > 0, "no traces in %s" % folder)
for t in traces:
    name = os.path.basename(t)
    header, allocs, frees, peak, marks, last_t = read(t)
    r = subprocess.run([replay, "--backend", "sim-vmm", "--repeat", "1", "--find-min-limit", t],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "%s: exit %d: %s" % (name, r.returncode, r.stderr[-300:]))
    if r.returncode != 0:
        continue
    res = json.loads(r.stdout.splitlines()[0])
    check(res["trace"] == name, "%s: trace %r" % (name, res["trace"]))
    check(res["ops"] == allocs + frees, "%s: ops %d, file has %d" % (name, res["ops"], allocs + frees))
    if header and "allocs" in header:
        check(header["allocs"] == allocs and header["frees"] == frees,
              "%s: header counts %s/%s, file %d/%d" % (name, header["allocs"], header["frees"],
                                                        allocs, frees))
    check(res["peak_live"] == peak, "%s: peak_live %d, file %d" % (name, res["peak_live"], peak))
    if header and "source" in header:  # written by libvmem_trace
        check(header.get("peak_live") == peak,
              "%s: converter's peak_live %s, file %d" % (name, header.get("peak_live"), peak))
        check(header.get("live_at_end") == allocs - frees == res["never_freed"],
              "%s: live at end: converter %s, file %d, vmem-replay %d" %
              (name, header.get("live_at_end"), allocs - frees, res["never_freed"]))
    if header and header.get("source") == "libvmem_trace.record":
        want = sum(1 for s in header["step_t_us"][1:] if s < last_t)
        check(marks == want and res["steps"] == marks and res["steps_source"] == "marks",
              "%s: %d step lines, %d step() calls before the last event, vmem-replay %d (%s)" %
              (name, marks, want, res["steps"], res["steps_source"]))
    check(res["failed_allocs"] == 0 and res["spilled_allocs"] == 0,
          "%s: failed %d, spilled %d without a limit" % (name, res["failed_allocs"],
                                                          res["spilled_allocs"]))
    check(res["min_limit"] >= peak and res["min_limit_ratio"] >= 1.0,
          "%s: min_limit %d below peak live %d" % (name, res["min_limit"], peak))
    print("%s: %d events, peak live %.1f MiB, min limit %.3fx" %
          (name, allocs + frees, peak / 2**20, res["min_limit_ratio"]))

for f in failures:
    print("FAIL:", f)
print("%d traces, %d failures" % (len(traces), len(failures)))
sys.exit(1 if failures else 0)
