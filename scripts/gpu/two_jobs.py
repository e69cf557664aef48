#!/usr/bin/env python3
"""Two PyTorch training jobs on one GPU, each on libvmem, steered by the
example scheduler (examples/two_jobs): the measurement behind
docs/kubernetes.md#two-jobs-on-one-gpu.  Run by scripts/gpu/two-jobs.sh.

Runs, one after the other (results in $OUT/<config>/):
  hp-alone   the high-priority job alone (also "the opportunistic job not running")
  opp-alone  the opportunistic job alone, for as long as hp-alone took
  static     both, each with half the budget, no scheduler moves
  dynamic    both, the scheduler moving memory and the time share
The budget (the memory the pair may hold) is the high-priority job's peak
alone plus half the opportunistic job's peak alone, so that the pair does not
fit when the high-priority job is at its largest.  Prints a table last and
writes $OUT/two_jobs.json and $OUT/memory.svg.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.environ.get("OUT", "/tmp/vmem-two-jobs")
BUILD = os.environ.get("BUILD", "build-gpu")
VMEMCTL = os.path.join(ROOT, BUILD, "tools", "vmemctl")
HP_PHASES = os.environ.get("TWO_JOBS_HP_PHASES", "32:40,96:40,192:40")
OPP_BATCH = os.environ.get("TWO_JOBS_OPP_BATCH", "96")
MODEL = os.environ.get("TWO_JOBS_MODEL", "resnet50")
MODE = os.environ.get("TWO_JOBS_MODE", "torch")  # sim: a dry run of this script on the CPU
CAP_S = os.environ.get("TWO_JOBS_HP_MAX_SECONDS", "50")
MiB = 1 << 20


def run(config, budget, extra=()):
    out = os.path.join(OUT, config)
    cmd = [sys.executable, os.path.join(ROOT, "examples", "two_jobs", "run_pair.py"),
           "--config", config, "--out", out, "--budget", str(budget), "--mode", MODE,
           "--hp-phases", HP_PHASES, "--opp-batch", OPP_BATCH, "--model", MODEL,
           "--vmemctl", VMEMCTL, "--hp-max-seconds", CAP_S] + list(extra)
    print("== %s: %s" % (config, " ".join(cmd)), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        for f in ("hp.stdout", "opp.stdout", "scheduler.stdout"):
            p = os.path.join(out, f)
            if os.path.exists(p):
                print("--- %s" % f)
                print(open(p).read()[-3000:])
    s = json.load(open(os.path.join(out, "summary.json")))
    print(json.dumps(s), flush=True)
    return s


def peak(s, job):
    return max(p["peak_bytes"] for p in s[job]["phases"])


def main():
    os.makedirs(OUT, exist_ok=True)
    big = os.environ.get("TWO_JOBS_ALONE_LIMIT", "64G")
    alone = run("hp-alone", big)
    opp_alone = run("opp-alone", big, ["--opp-seconds", "%.0f" % alone["seconds"]])
    hp_peak, opp_peak = peak(alone, "hp"), peak(opp_alone, "opp")
    budget = (hp_peak + opp_peak // 2 + 255 * MiB) // (256 * MiB) * (256 * MiB)
    static = run("static", budget)
    dyn = run("dynamic", budget)

    def thr(s, job):
        return s.get(job, {}).get("samples_per_s", 0.0)

    hp_a, opp_a = thr(alone, "hp"), thr(opp_alone, "opp")

    def norm(s):
        return thr(s, "hp") / hp_a + (thr(s, "opp") / opp_a if opp_a else 0)

    rows = []
    for name, s in (("hp alone (= opp not running)", alone), ("opp alone", opp_alone),
                    ("static 50/50", static), ("dynamic (scheduler)", dyn)):
        rows.append((name, thr(s, "hp"), thr(s, "opp"), norm(s) if name != "opp alone" else
                     thr(s, "opp") / opp_a,
                     s.get("hp", {}).get("spilled_steps", "-"), s.get("opp", {}).get("spilled_steps", "-"),
                     s.get("hp", {}).get("failures", 0) + s.get("opp", {}).get("failures", 0),
                     s["exit"]))
    # the high-priority job's step time per phase against alone
    phase_rows = []
    within = True
    for pa, pd, ps in zip(alone["hp"]["phases"], dyn["hp"]["phases"], static["hp"]["phases"]):
        r = pd["median_step_s"] / pa["median_step_s"]
        within = within and r <= 1.10
        phase_rows.append((pa["phase"], pa["batch"], pa["median_step_s"] * 1e3,
                           pd["median_step_s"] * 1e3, r, pd["mean_step_s"] / pa["mean_step_s"],
                           pd["spilled_steps"], ps["median_step_s"] * 1e3, ps["spilled_steps"],
                           pa["peak_bytes"] / MiB))
    result = {"budget": budget, "hp_peak": hp_peak, "opp_peak": opp_peak, "hp_phases": HP_PHASES,
              "opp_batch": OPP_BATCH, "model": MODEL, "runs": {"hp-alone": alone,
              "opp-alone": opp_alone, "static": static, "dynamic": dyn}, "table": rows,
              "phase_table": phase_rows, "hp_within_10pct_median": within}
    json.dump(result, open(os.path.join(OUT, "two_jobs.json"), "w"), indent=1)
    csv = os.path.join(OUT, "dynamic", "memory.csv")
    if os.path.exists(csv):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_two_jobs.py"), csv,
                        os.path.join(OUT, "memory.svg"), "--budget", str(budget),
                        "--title", "Two ResNet jobs on one GPU, budget %.1f GiB" % (budget / 2**30)])
    print("\nbudget %.2f GiB (hp peak alone %.2f GiB + half of opp peak alone %.2f GiB)" %
          (budget / 2**30, hp_peak / 2**30, opp_peak / 2**30))
    print("%-30s | %9s | %9s | %10s | %8s | %8s | %6s | exit" %
          ("run", "hp img/s", "opp img/s", "norm. sum", "hp spill", "opp spill", "fails"))
    for r in rows:
        print("%-30s | %9.1f | %9.1f | %10.3f | %8s | %8s | %6s | %s" % r)
    print("\nphase | batch | hp alone ms | dynamic ms | ratio (median) | ratio (mean) | "
          "dyn spilled steps | static ms | static spilled | peak MiB alone")
    for p in phase_rows:
        print("%5d | %5d | %11.1f | %10.1f | %14.3f | %12.3f | %17d | %9.1f | %14d | %8.0f" % p)
    print("\nhigh-priority median step time within 10%% of alone in every phase: %s" %
          ("yes" if within else "NO"))
    print("no failed allocation in any run: %s" %
          ("yes" if all(r[6] == 0 for r in rows) else "NO"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
