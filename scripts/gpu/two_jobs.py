#!/usr/bin/env python3
"""Two PyTorch training jobs on one GPU, each on libvmem, steered by the
example scheduler (examples/two_jobs): the measurement behind
docs/kubernetes.md#two-jobs-on-one-gpu.  Run by scripts/gpu/two-jobs.sh.

Runs, one after the other (results in $OUT/<config>/):
  hp-alone   the high-priority job alone (also "the opportunistic job not running")
  opp-alone  the opportunistic job alone, for as long as hp-alone took
  static     both, each with half the budget, no scheduler moves
  dynamic    both, the scheduler moving memory and the time share
then hp-alone and dynamic again, alternating, TWO_JOBS_REPEAT times in all
(default 2; hp-alone-2, dynamic-2, ...): the phase ratios are of the medians
over those runs, and every run's figure is printed with the spread of the
alone runs (identical alone runs differ by more than 10% in CPU-bound phases).
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

TWO_JOBS_RUNS picks the runs (default hp-alone,opp-alone,static,dynamic;
hp-alone and dynamic always run).  Without opp-alone the budget must be given
(TWO_JOBS_BUDGET, bytes or 6G-style) and the opportunistic job's figures
against alone are not printed; without static, comparison (b) is not.
"""
import csv as csvmod
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.environ.get("OUT", "/tmp/vmem-two-jobs")
BUILD = os.environ.get("BUILD", "build-gpu")
VMEMCTL = os.path.join(ROOT, BUILD, "tools", "vmemctl")
# GPU-bound phases by default: in the launch-bound ones of runs 1-7
# (32:120,96:120,192:120) identical alone runs differed by 1.05-1.26x per
# phase on the H100, more than the 10% the check is about (run 8 in
# docs/kubernetes.md: alone spread 1.00 in every phase with these)
HP_PHASES = os.environ.get("TWO_JOBS_HP_PHASES", "192:120,288:120,384:120")
OPP_BATCH = os.environ.get("TWO_JOBS_OPP_BATCH", "96")
MODEL = os.environ.get("TWO_JOBS_MODEL", "resnet50")
MODE = os.environ.get("TWO_JOBS_MODE", "torch")  # sim: a dry run of this script on the CPU
CAP_S = os.environ.get("TWO_JOBS_HP_MAX_SECONDS", "35")
# the scheduler polls the statistics files every 20 ms: a growth of the
# high-priority job costs it the steps until the cut and the grant land
SCHED_ARGS = os.environ.get("TWO_JOBS_SCHEDULER_ARGS", "--interval 0.02")
RUNS = os.environ.get("TWO_JOBS_RUNS", "hp-alone,opp-alone,static,dynamic")
BUDGET = os.environ.get("TWO_JOBS_BUDGET", "")
# hp-alone and dynamic run this many times, alternating after the first set
# (hp-alone-2, dynamic-2, ...): identical hp-alone runs on the H100 differed
# by up to 1.6x in the CPU-bound phases (two-jobs-diag), so one alone run
# cannot resolve a 10% slowdown; the phase ratios are of the medians over runs
REPEAT = int(os.environ.get("TWO_JOBS_REPEAT", "2"))
MiB = 1 << 20
sys.path.insert(0, os.path.join(ROOT, "examples", "two_jobs"))
from scheduler import parse_size  # noqa: E402


def run(config, budget, extra=(), name=None):
    out = os.path.join(OUT, name or config)
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
    runs = {r.strip() for r in RUNS.split(",") if r.strip()}
    unknown = runs - {"hp-alone", "opp-alone", "static", "dynamic"}
    if unknown:
        print("two-jobs: TWO_JOBS_RUNS: unknown run(s) %s" % ", ".join(sorted(unknown)))
        return 2
    if "opp-alone" not in runs and not BUDGET:
        print("two-jobs: without the opp-alone run TWO_JOBS_BUDGET must give the budget")
        return 2
    big = os.environ.get("TWO_JOBS_ALONE_LIMIT", "64G")
    alone = run("hp-alone", big)
    opp_alone = {"config": "opp-alone", "exit": {}}
    if "opp-alone" in runs:
        opp_alone = run("opp-alone", big, ["--opp-seconds", "%.1f" % alone["seconds"]])
    ok = check_peak(alone, "hp")
    if "opp" in opp_alone:
        ok = check_peak(opp_alone, "opp") and ok
    if not ok:
        print("two-jobs: the per-step peaks are not the jobs' peaks; no budget from them")
        return 1
    hp_peak = peak(alone, "hp")
    opp_peak = peak(opp_alone, "opp") if "opp" in opp_alone else 0
    if BUDGET:
        try:
            budget = parse_size(BUDGET)
        except ValueError:
            print("two-jobs: TWO_JOBS_BUDGET %r: bytes, or an integer with K, M or G" % BUDGET)
            return 2
    else:
        budget = (hp_peak + opp_peak // 2 + 255 * MiB) // (256 * MiB) * (256 * MiB)
    static = run("static", budget) if "static" in runs else {"config": "static", "exit": {}}
    dyn = run("dynamic", budget)
    alones, dyns = [alone], [dyn]
    for k in range(2, max(REPEAT, 1) + 1):
        alones.append(run("hp-alone", big, name="hp-alone-%d" % k))
        dyns.append(run("dynamic", budget, name="dynamic-%d" % k))

    def thr(s, job):
        return s.get(job, {}).get("samples_per_s", 0.0)

    hp_a, opp_a = thr(alone, "hp"), thr(opp_alone, "opp")

    def rel(s, job, base):
        return thr(s, job) / base if base else float("nan")  # nan: its alone run not run

    def norm(s):
        return rel(s, "hp", hp_a) + rel(s, "opp", opp_a)

    def g(s, job, key, default="-"):
        return s[job].get(key, default) if job in s else default

    rows = []
    for name, s in (("hp alone (= opp not running)", alone), ("opp alone", opp_alone),
                    ("static 50/50", static), ("dynamic (scheduler)", dyn)):
        if not s["exit"]:
            continue  # not run (TWO_JOBS_RUNS)
        rows.append((name, thr(s, "hp"), thr(s, "opp"), thr(s, "hp") + thr(s, "opp"),
                     rel(s, "hp", hp_a), rel(s, "opp", opp_a), norm(s),
                     g(s, "hp", "steps"), g(s, "hp", "spilled_steps"), g(s, "opp", "steps"),
                     g(s, "opp", "spilled_steps"),
                     g(s, "hp", "failures", 0) + g(s, "opp", "failures", 0), s["exit"]))
    no_fail = all(r[11] == 0 for r in rows) and all(
        v == 0 for r in rows for v in r[12].values())
    # the high-priority job's step time per phase against alone (median of
    # each phase without its first two steps, which include the batch change)
    phase_rows, spread_rows = [], []
    within = len(dyn["hp"].get("phases", [])) == len(alone["hp"]["phases"])
    st_phases = {p["phase"]: p for p in static.get("hp", {}).get("phases", [])}

    def per_run(runs_, ph, key="median_step_s"):
        """Each run's figure `key` for phase ph."""
        return [p[key] for s_ in runs_
                for p in s_.get("hp", {}).get("phases", []) if p["phase"] == ph]

    within_mean = within

    for pa, pd in zip(alone["hp"]["phases"], dyn["hp"].get("phases", [])):
        ma, md = per_run(alones, pa["phase"]), per_run(dyns, pa["phase"])
        r = statistics.median(md) / statistics.median(ma)
        within = within and r <= 1.10
        # the mean sees the steps slowed by the other job's bursts, which
        # the median hides (run 8: medians 1.00-1.01, a third of the steps
        # of phases 0 and 1 over 1.1x); the median over the runs of each
        # run's mean without the phase's first two steps
        r_mean = (statistics.median(per_run(dyns, pa["phase"], "mean_settled_step_s")) /
                  statistics.median(per_run(alones, pa["phase"], "mean_settled_step_s")))
        within_mean = within_mean and r_mean <= 1.10
        spread_rows.append((pa["phase"], " ".join("%.1f" % (x * 1e3) for x in ma),
                            max(ma) / min(ma), " ".join("%.1f" % (x * 1e3) for x in md), r))
        ps = st_phases.get(pa["phase"])
        phase_rows.append((pa["phase"], pa["batch"], pa["peak_bytes"] / MiB,
                           statistics.median(ma) * 1e3, statistics.median(md) * 1e3, r,
                           "yes" if r <= 1.10 else "NO",
                           r_mean, pd["steps"], pd["spilled_steps"],
                           pd.get("opp_steps", 0), pd.get("opp_busy", 0.0),
                           pd.get("opp_perf_median", 0),
                           ps["median_step_s"] * 1e3 if ps else float("nan"),
                           "%d/%d" % (ps["spilled_steps"], ps["steps"]) if ps else "-"))
    d_norm, s_norm = norm(dyn), norm(static)
    sum_static = thr(static, "hp") + thr(static, "opp")
    compare = {
        "a_hp_of_alone": rel(dyn, "hp", hp_a),
        "a_opp_of_alone": rel(dyn, "opp", opp_a) if opp_a else None,
        "b_norm_sum_dynamic_over_static": d_norm / s_norm if s_norm and opp_a else None,
        "b_img_s_dynamic_over_static": (thr(dyn, "hp") + thr(dyn, "opp")) / sum_static
        if sum_static else None,
        "c_norm_sum_dynamic_over_opp_not_running": d_norm if opp_a else None,
        "c_img_s_dynamic_over_opp_not_running": (thr(dyn, "hp") + thr(dyn, "opp")) / hp_a,
    }
    csv = os.path.join(OUT, "dynamic", "memory.csv")
    baselines = controller_baselines(csv)
    result = {"budget": budget, "hp_peak": hp_peak, "opp_peak": opp_peak, "hp_phases": HP_PHASES,
              "opp_batch": OPP_BATCH, "model": MODEL, "runs": {"hp-alone": alone,
              "opp-alone": opp_alone, "static": static, "dynamic": dyn}, "table": rows,
              "phase_table": phase_rows, "phase_runs": spread_rows,
              "repeat_runs": {"hp-alone": alones[1:], "dynamic": dyns[1:]},
              "compare_dynamic": compare,
              "controller_baselines_ms": baselines,
              "hp_within_10pct_median": within, "hp_within_10pct_mean": within_mean,
              "no_failure": no_fail}
    json.dump(result, open(os.path.join(OUT, "two_jobs.json"), "w"), indent=1)
    if os.path.exists(csv):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_two_jobs.py"), csv,
                        os.path.join(OUT, "memory.svg"), "--budget", str(budget),
                        "--title", "Two %s jobs on one GPU, budget %.1f GiB" %
                        (MODEL, budget / 2**30)])
    if BUDGET:
        print("\nbudget %.2f GiB (TWO_JOBS_BUDGET)" % (budget / 2**30))
    else:
        print("\nbudget %.2f GiB = hp peak alone (largest phase) %.2f GiB + half of opp peak "
              "alone %.2f GiB, rounded up to 256 MiB" %
              (budget / 2**30, hp_peak / 2**30, opp_peak / 2**30))
    print("throughput: samples/s over the high-priority job's run (opp alone: its own run)")
    print("%-28s | %8s | %9s | %9s | %7s | %8s | %9s | %8s | %8s | %9s | %9s | %5s | exit" %
          ("run", "hp img/s", "opp img/s", "sum img/s", "hp/alone", "opp/alone", "norm. sum",
           "hp steps", "hp spill", "opp steps", "opp spill", "fails"))
    for r in rows:
        print("%-28s | %8.1f | %9.1f | %9.1f | %7.3f | %8.3f | %9.3f | %8s | %8s | %9s | %9s | "
              "%5s | %s" % r)

    def fmt(v):
        return "x%.3f" % v if v is not None else "not run"

    print("\ndynamic against")
    print("  (a) each job alone:        hp/alone %s, opp/alone %s" %
          (fmt(compare["a_hp_of_alone"]), fmt(compare["a_opp_of_alone"])))
    print("  (b) static 50/50:          normalised sum %s, img/s %s" %
          (fmt(compare["b_norm_sum_dynamic_over_static"]),
           fmt(compare["b_img_s_dynamic_over_static"])))
    print("  (c) opp not running:       normalised sum %s, img/s %s" %
          (fmt(compare["c_norm_sum_dynamic_over_opp_not_running"]),
           fmt(compare["c_img_s_dynamic_over_opp_not_running"])))
    print("\nhigh-priority job per phase, dynamic against alone (median without the phase's first "
          "two steps; hp alone and dynamic ms: the median over the runs); opp busy: share of the phase the opportunistic job was in a step")
    print("phase | batch | peak MiB alone | hp alone ms | dynamic ms | ratio (median) | "
          "within 10% | ratio (mean) | dyn steps | dyn spilled | opp steps | opp busy | "
          "opp perf | static ms | static spilled")
    for p in phase_rows:
        print("%5d | %5d | %14.0f | %11.1f | %10.1f | %14.3f | %10s | %12.3f | %9d | %11d | "
              "%9d | %8.2f | %8s | %9.1f | %14s" % p)
    print("\nper phase, every run (%d of each; the ratio above is of the medians over them): "
          "hp alone ms, their max/min, dynamic ms" % len(alones))
    for p in spread_rows:
        print("%5d | alone %-20s | spread %.2f%s | dynamic %-20s | ratio %.3f" % (
            p[0], p[1], p[2], " (noisier than the 10% target)" if p[2] > 1.10 else "", p[3], p[4]))
    print("controller baselines (ms, in the order taken): %s" %
          (", ".join("%.1f" % b for b in baselines) or "none"))
    print("\nhigh-priority median step time within 10%% of alone in every phase: %s" %
          ("yes" if within else "NO"))
    print("high-priority mean step time (first two steps of each phase left out) within 10%% "
          "of alone in every phase: %s" % ("yes" if within_mean else "NO"))
    print("no failed allocation and no failed process in any run: %s" %
          ("yes" if no_fail else "NO"))
    print("memory over time (dynamic): %s" % os.path.join(OUT, "memory.svg"))
    return 0


def controller_baselines(csv_path):
    """The high-priority step times alone the scheduler took (its CSV's
    hp_base_ms column), each once, in order."""
    out = []
    try:
        with open(csv_path) as f:
            for r in csvmod.DictReader(f):
                b = float(r.get("hp_base_ms") or 0)
                if b > 0 and (not out or out[-1] != b):
                    out.append(b)
    except OSError:
        pass
    return out


if __name__ == "__main__":
    sys.exit(main())
