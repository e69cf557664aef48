#!/usr/bin/env python3
"""Per-step report of a cut_bench.py run (issue 11), for jobs whose steps
differ: every cut step of each mode against the uncut process's step of the
same number (same shape, same data) and against naive placement's host bytes
in the same step.

    cut_steps_report.py DIR JOB     cut-JOB-*.json in DIR (CUT_UNCUT=1, and
                                    CUT_MODES with naive for the host bytes)
    cut_steps_report.py --rules DIR the rule in force, time and host bytes of
                                    every cut step of each job's planned+offload
                                    run in DIR (the rule trials at a glance)

For each mode and cut: one line per step (its number in the cut, in the run,
gpt2var's sequence length, time, uncut time, ratio, host bytes, naive's host
bytes, rule), the sums of steps 1- and 10- over the uncut steps, and (modes
other than naive) the host bytes against naive's and the steps above them.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cut_bench import var_length  # noqa: E402

MODES = ("naive", "planned", "planned-offload", "uncut")


def host(s):
    return s["host_placed"] + s["moved_to_host"]


def report(d, job):
    runs = {}
    for m in MODES:
        f = os.path.join(d, "cut-%s-%s.json" % (job, m))
        if os.path.exists(f):
            with open(f) as fh:
                runs[m] = json.load(fh)
    unc = {s["i"]: s["ms"] for s in runs.get("uncut", {}).get("steps", [])}
    naive = {s["i"]: host(s) for s in runs.get("naive", {}).get("steps", [])}
    nan = float("nan")
    for m, r in runs.items():
        if m == "uncut":
            continue
        print("== %s (ok %s)" % (m, r.get("ok")))
        for cut in ("cut75", "cut50"):
            st = [s for s in r["steps"] if s["phase"] == cut]
            for s in st:
                print("%s %2d i %2d len %4d %8.1f ms  uncut %7.1f  x %.2f  host %6.2f GB  naive %6.2f GB"
                      "  rule %s" % (cut, s["k"], s["i"], var_length(s["i"]), s["ms"],
                                     unc.get(s["i"], nan),
                                     s["ms"] / unc[s["i"]] if s["i"] in unc else nan,
                                     host(s) / 1e9, naive.get(s["i"], nan) / 1e9, s.get("rule")))
            for lo in (1, 10):
                part = [s for s in st if s["k"] >= lo and s["i"] in unc]
                if part:
                    ms, ums = sum(s["ms"] for s in part), sum(unc[s["i"]] for s in part)
                    print("%s steps %d-%d: sum %.0f ms, uncut %.0f ms, x %.2f" % (
                        cut, lo, st[-1]["k"], ms, ums, ms / ums))
            if m != "naive" and naive:
                part = [s for s in st if s["k"] >= 1 and s["i"] in naive]
                more = [s for s in part if host(s) > naive[s["i"]]]
                print("%s steps 1-: host bytes %.2f GB against naive's %.2f; steps above naive: "
                      "%d of %d %s" % (cut, sum(host(s) for s in part) / 1e9,
                                       sum(naive[s["i"]] for s in part) / 1e9, len(more), len(part),
                                       [(s["k"], round(host(s) / 1e9, 2), round(naive[s["i"]] / 1e9, 2))
                                        for s in more]))


def rules(d):
    for f in sorted(glob.glob(os.path.join(d, "cut-*-planned-offload.json"))):
        with open(f) as fh:
            r = json.load(fh)
        for cut in ("cut75", "cut50"):
            st = [s for s in r["steps"] if s["phase"] == cut]
            print(r["job"], cut, " ".join("%s:%.0f/%.2f" % ((s.get("rule") or "-")[:4], s["ms"],
                                                            host(s) / 1e9) for s in st))


def main(argv):
    if len(argv) == 3 and argv[1] == "--rules":
        rules(argv[2])
    elif len(argv) == 3 and not argv[1].startswith("-"):
        report(argv[1], argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
