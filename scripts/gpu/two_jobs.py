#!/usr/bin/env python3
"""Two PyTorch training jobs on one GPU, each on libvmem, steered by the
example scheduler (examples/two_jobs): the measurement behind
docs/kubernetes.md#two-jobs-on-one-gpu.  Run by scripts/gpu/two-jobs.sh.

Runs, one after the other (results in $OUT/<config>/):
  hp-alone   the high-priority job alone (also "the opportunistic job not running")
  opp-alone  the opportunistic job alone, for as long as hp-alone took
  static     both, each with half the budget, no scheduler moves
  dynamic    both, the scheduler moving memory and the time share
Both jobs of a run build their models first; the clock starts with the
high-priority job's first step (examples/two_jobs/run_pair.py), so start-up
is in no figure.  The budget (the memory the pair may hold) is the
high-priority job's peak in its largest phase alone plus half the
opportunistic job's peak alone: the pair fits while the high-priority job is
small and does not when it is at its largest.  The peaks are per-step maxima
(deviceMemUsedMax + hostMemUsedMax); they are checked against the process's
lifetime peak (devicePeakInUse + hostPeakInUse) before the pairs run, and the
script stops there when they disagree (a step boundary in the wrong place
makes the per-step figure meaningless).  Prints a table last and writes
$OUT/two_jobs.json and $OUT/memory.svg.
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
HP_PHASES = os.environ.get("TWO_JOBS_HP_PHASES", "32:120,96:120,192:120")
OPP_BATCH = os.environ.get("TWO_JOBS_OPP_BATCH", "96")
MODEL = os.environ.get("TWO_JOBS_MODEL", "resnet50")
MODE = os.environ.get("TWO_JOBS_MODE", "torch")  # sim: a dry run of this script on the CPU
CAP_S = os.environ.get("TWO_JOBS_HP_MAX_SECONDS", "35")
# the scheduler polls the statistics files every 20 ms: a growth of the
# high-priority job costs it the steps until the cut and the grant land
SCHED_ARGS = os.environ.get("TWO_JOBS_SCHEDULER_ARGS", "--interval 0.02")
MiB = 1 << 20


def run(config, budget, extra=()):
    out = os.path.join(OUT, config)
    cmd = [sys.executable, os.path.join(ROOT, "examples", "two_jobs", "run_pair.py"),
           "--config", config, "--out", out, "--budget", str(budget), "--mode", MODE,
           "--hp-phases", HP_PHASES, "--opp-batch", OPP_BATCH, "--model", MODEL,
           "--vmemctl", VMEMCTL, "--hp-max-seconds", CAP_S,
           "--scheduler-args=" + SCHED_ARGS] + list(extra)
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


def check_peak(s, job):
    """The largest per-step peak against the process's lifetime peak: equal
    when every allocation is inside a step, as here."""
    per_step, life = peak(s, job), s[job].get("lifetime_peak_bytes", 0)
    ok = life > 0 and per_step >= 0.9 * life
    print("%s: largest per-step peak %.0f MiB, lifetime peak %.0f MiB: %s" %
          (job, per_step / MiB, life / MiB, "consistent" if ok else "INCONSISTENT"), flush=True)
    return ok


def main():
    os.makedirs(OUT, exist_ok=True)
    big = os.environ.get("TWO_JOBS_ALONE_LIMIT", "64G")
    alone = run("hp-alone", big)
    opp_alone = run("opp-alone", big, ["--opp-seconds", "%.1f" % alone["seconds"]])
    if not (check_peak(alone, "hp") & check_peak(opp_alone, "opp")):
        print("two-jobs: the per-step peaks are not the jobs' peaks; no budget from them")
        return 1
    hp_peak, opp_peak = peak(alone, "hp"), peak(opp_alone, "opp")
    budget = (hp_peak + opp_peak // 2 + 255 * MiB) // (256 * MiB) * (256 * MiB)
    static = run("static", budget)
    dyn = run("dynamic", budget)

    def thr(s, job):
        return s.get(job, {}).get("samples_per_s", 0.0)

    hp_a, opp_a = thr(alone, "hp"), thr(opp_alone, "opp")

    def rel(s, job, base):
        return thr(s, job) / base if base else 0.0

    def norm(s):
        return rel(s, "hp", hp_a) + rel(s, "opp", opp_a)

    def g(s, job, key, default="-"):
        return s[job].get(key, default) if job in s else default

    rows = []
    for name, s in (("hp alone (= opp not running)", alone), ("opp alone", opp_alone),
                    ("static 50/50", static), ("dynamic (scheduler)", dyn)):
        rows.append((name, thr(s, "hp"), thr(s, "opp"), thr(s, "hp") + thr(s, "opp"),
                     rel(s, "hp", hp_a), rel(s, "opp", opp_a), norm(s),
                     g(s, "hp", "steps"), g(s, "hp", "spilled_steps"), g(s, "opp", "steps"),
                     g(s, "opp", "spilled_steps"),
                     g(s, "hp", "failures", 0) + g(s, "opp", "failures", 0), s["exit"]))
    no_fail = all(r[11] == 0 for r in rows) and all(
        v == 0 for r in rows for v in r[12].values())
    # the high-priority job's step time per phase against alone (median of
    # each phase without its first two steps, which include the batch change)
    phase_rows = []
    within = len(dyn["hp"].get("phases", [])) == len(alone["hp"]["phases"])
    st_phases = {p["phase"]: p for p in static["hp"].get("phases", [])}
    for pa, pd in zip(alone["hp"]["phases"], dyn["hp"].get("phases", [])):
        r = pd["median_step_s"] / pa["median_step_s"]
        within = within and r <= 1.10
        ps = st_phases.get(pa["phase"])
        phase_rows.append((pa["phase"], pa["batch"], pa["peak_bytes"] / MiB,
                           pa["median_step_s"] * 1e3, pd["median_step_s"] * 1e3, r,
                           pd["mean_step_s"] / pa["mean_step_s"], pd["steps"], pd["spilled_steps"],
                           ps["median_step_s"] * 1e3 if ps else float("nan"),
                           "%d/%d" % (ps["spilled_steps"], ps["steps"]) if ps else "-"))
    d_norm, s_norm = norm(dyn), norm(static)
    compare = {
        "a_hp_of_alone": rel(dyn, "hp", hp_a), "a_opp_of_alone": rel(dyn, "opp", opp_a),
        "b_norm_sum_dynamic_over_static": d_norm / s_norm if s_norm else None,
        "b_img_s_dynamic_over_static": (thr(dyn, "hp") + thr(dyn, "opp")) /
        max(thr(static, "hp") + thr(static, "opp"), 1e-9),
        "c_norm_sum_dynamic_over_opp_not_running": d_norm,
        "c_img_s_dynamic_over_opp_not_running": (thr(dyn, "hp") + thr(dyn, "opp")) / hp_a,
    }
    result = {"budget": budget, "hp_peak": hp_peak, "opp_peak": opp_peak, "hp_phases": HP_PHASES,
              "opp_batch": OPP_BATCH, "model": MODEL, "runs": {"hp-alone": alone,
              "opp-alone": opp_alone, "static": static, "dynamic": dyn}, "table": rows,
              "phase_table": phase_rows, "compare_dynamic": compare,
              "hp_within_10pct_median": within, "no_failure": no_fail}
    json.dump(result, open(os.path.join(OUT, "two_jobs.json"), "w"), indent=1)
    csv = os.path.join(OUT, "dynamic", "memory.csv")
    if os.path.exists(csv):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_two_jobs.py"), csv,
                        os.path.join(OUT, "memory.svg"), "--budget", str(budget),
                        "--title", "Two %s jobs on one GPU, budget %.1f GiB" %
                        (MODEL, budget / 2**30)])
    print("\nbudget %.2f GiB = hp peak alone (largest phase) %.2f GiB + half of opp peak alone "
          "%.2f GiB, rounded up to 256 MiB" % (budget / 2**30, hp_peak / 2**30, opp_peak / 2**30))
    print("throughput: samples/s over the high-priority job's run (opp alone: its own run)")
    print("%-28s | %8s | %9s | %9s | %7s | %8s | %9s | %8s | %8s | %9s | %9s | %5s | exit" %
          ("run", "hp img/s", "opp img/s", "sum img/s", "hp/alone", "opp/alone", "norm. sum",
           "hp steps", "hp spill", "opp steps", "opp spill", "fails"))
    for r in rows:
        print("%-28s | %8.1f | %9.1f | %9.1f | %7.3f | %8.3f | %9.3f | %8s | %8s | %9s | %9s | "
              "%5s | %s" % r)
    print("\ndynamic against")
    print("  (a) each job alone:        hp %.3f of alone, opp %.3f of alone" %
          (compare["a_hp_of_alone"], compare["a_opp_of_alone"]))
    print("  (b) static 50/50:          normalised sum x%.3f, img/s x%.3f" %
          (compare["b_norm_sum_dynamic_over_static"] or float("nan"),
           compare["b_img_s_dynamic_over_static"]))
    print("  (c) opp not running:       normalised sum x%.3f, img/s x%.3f" %
          (compare["c_norm_sum_dynamic_over_opp_not_running"],
           compare["c_img_s_dynamic_over_opp_not_running"]))
    print("\nphase | batch | peak MiB alone | hp alone ms | dynamic ms | ratio (median) | "
          "ratio (mean) | dyn steps | dyn spilled | static ms | static spilled")
    for p in phase_rows:
        print("%5d | %5d | %14.0f | %11.1f | %10.1f | %14.3f | %12.3f | %9d | %11d | %9.1f | %14s"
              % p)
    print("\nhigh-priority median step time within 10%% of alone in every phase: %s" %
          ("yes" if within else "NO"))
    print("no failed allocation and no failed process in any run: %s" %
          ("yes" if no_fail else "NO"))
    print("memory over time (dynamic): %s" % os.path.join(OUT, "memory.svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
