"""vmem-replay on the real traces kept in the repository (tests/data/):
every trace replays, its counts and peak live bytes agree with an
independent reading of the file, and --find-min-limit finds a limit at or
above the peak live bytes.  Traces written by libvmem_trace (a "source" in
the header) are also checked against what the converter said: its peak live
bytes and blocks live at the end, and for record() its step boundaries (one
's' line per step() that has events after it).  No trace found is a failure.

Held over live (issue 14): without a limit, peak held / peak live on sim-vmm
must stay at or below HELD_BOUND for the traces named there (what the growth
policy reaches, docs/benchmarks.md "Held over live", plus 0.01); the test
checks that the policy before issue 14 (VMEM_GROWTH=legacy) exceeds the bound
on tinylm, so the check can fail.  With VMEM_ARENA_PEAK, vmem-arena-peak must
report the same held/live as vmem-replay and dump the arena at that peak.

    python3 bench/test_data.py VMEM_REPLAY TRACE_DIR [VMEM_ARENA_PEAK]
"""
import glob
import gzip
import json
import os
import subprocess
import sys

replay, folder = sys.argv[1], sys.argv[2]
arena_peak = sys.argv[3] if len(sys.argv) > 3 else None
# Upper bounds of peak held / peak live on sim-vmm without a limit (sim-vmm is
# deterministic: the figures are exact; each bound is the figure plus 0.01).
HELD_BOUND = {"trace_bert.txt.gz": 1.098, "trace_resnet50.txt.gz": 1.023,
              "trace_resnet18.txt.gz": 1.044, "trace_tinylm.txt.gz": 1.156,
              "trace_vit.txt.gz": 1.020, "trace_seg.txt.gz": 1.090,
              "trace_gpt2accum.txt.gz": 1.192, "trace_convnext.txt.gz": 1.032,
              "trace_cnnvary.txt.gz": 1.036, "trace_bertserve.txt.gz": 1.271,
              "trace_gpt2var.txt.gz": 1.082, "trace_bertvar.txt.gz": 1.098,
              "trace_cnnbuckets.txt.gz": 1.014}
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
    bound = HELD_BOUND.get(name)
    check(bound is None or res["frag"] <= bound,
          "%s: held/live %.4f above %.3f (sim-vmm, no limit)" % (name, res["frag"], bound or 0))
    if arena_peak:
        a = subprocess.run([arena_peak, "--backend", "sim-vmm", t], capture_output=True,
                           text=True, timeout=300)
        first = a.stdout.splitlines()[0] if a.stdout else ""
        check(a.returncode == 0 and "held/live %.4f" % res["frag"] in first
              and "\nregion +0.0 MiB" in a.stdout,
              "%s: vmem-arena-peak exit %d, %r (replay: held/live %.4f)" %
              (name, a.returncode, first, res["frag"]))
    print("%s: %d events, peak live %.1f MiB, held/live %.4f, min limit %.3fx" %
          (name, allocs + frees, peak / 2**20, res["frag"], res["min_limit_ratio"]))

# The bound can fail: the policy before issue 14 holds more on tinylm.
tiny = os.path.join(folder, "trace_tinylm.txt.gz")
if os.path.exists(tiny):
    r = subprocess.run([replay, "--backend", "sim-vmm", "--repeat", "1", tiny], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, VMEM_GROWTH="legacy"))
    legacy = json.loads(r.stdout.splitlines()[0])["frag"] if r.returncode == 0 else 0
    check(legacy > HELD_BOUND["trace_tinylm.txt.gz"],
          "tinylm: VMEM_GROWTH=legacy held/live %.4f does not exceed the bound" % legacy)

for f in failures:
    print("FAIL:", f)
print("%d traces, %d failures" % (len(traces), len(failures)))
sys.exit(1 if failures else 0)
