#!/usr/bin/env python3
"""Replays a two-jobs run's per-step logs through the example scheduler's
policy, to see what it decided and why (docs/kubernetes.md#two-jobs-on-one-gpu).

    two_jobs_replay.py RUN_DIR [--scheduler PATH/scheduler.py]

RUN_DIR is scripts/gpu/two-jobs.sh's $OUT (or a copy: docs/gpu-runs/...):
hp-alone/hp.log.jsonl and dynamic/{hp,opp}.log.jsonl, plain or .gz, and
dynamic/summary.json (the budget).  The jobs' step-end lines, in wall-time
order, are fed to Policy.update as their statistics would have been (the
scheduler itself polls, so it may see fewer steps); printed: each change of
the baseline, probe state or share, then per phase of the high-priority job
its median step time alone and in the pair, and the share of the phase the
opportunistic job spent in a step.  --scheduler replays another version of
the policy (e.g. `git show REV:examples/two_jobs/scheduler.py > old.py`):
only the policy that ran gives the run's own decisions; any other answers
"what would it have decided on these steps", not what its run would do.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "two_jobs"))
import run_pair  # noqa: E402


def load_log(run_dir, config, job):
    base = os.path.join(run_dir, config, "%s.log.jsonl" % job)
    return run_pair.read_log(base if os.path.exists(base) else base + ".gz")


def stats_of(row):
    """A step-end log line as the statistics the scheduler reads."""
    return {"steps": row["step"] + 1, "deviceMemUsedMax": row["dev_max"],
            "hostMemUsedMax": row["host_max"], "deviceHeld": row["held"],
            "miniBatchDuration": row["step_s"] * 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--scheduler", default=os.path.join(ROOT, "examples", "two_jobs",
                                                        "scheduler.py"))
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("replayed_scheduler", a.scheduler)
    sched = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sched)
    hp, opp = load_log(a.run_dir, "dynamic", "hp"), load_log(a.run_dir, "dynamic", "opp")
    alone = load_log(a.run_dir, "hp-alone", "hp")
    if not hp or not opp:
        raise SystemExit("two_jobs_replay: no dynamic/hp or dynamic/opp log in %s" % a.run_dir)
    with open(os.path.join(a.run_dir, "dynamic", "summary.json")) as f:
        budget = int(json.load(f)["budget"])
    policy = sched.Policy(budget, budget // 16)  # the scheduler's defaults
    t0 = hp[0]["wall"] - hp[0]["step_s"]
    events = sorted([(r["wall"], "hp", r) for r in hp] + [(r["wall"], "opp", r) for r in opp],
                    key=lambda e: e[0])
    latest, shown = {"hp": None, "opp": None}, None
    print("t s | hp step | baseline ms | probing | perf | hp limit MiB | opp limit MiB")
    for wall, job, row in events:
        latest[job] = stats_of(row)
        hp_l, opp_l, perf = policy.update(latest["hp"], latest["opp"], wall - t0)
        state = (policy.baseline, policy.probing, perf)
        if job == "hp" and state != shown:
            print("%6.3f | %7d | %11s | %7s | %4d | %12d | %13d" % (
                wall - t0, row["step"], "%.1f" % (policy.baseline * 1e3) if policy.baseline
                else "-", policy.probing, perf, hp_l >> 20, opp_l >> 20))
            shown = state
    print("\nphase | hp alone ms | dynamic ms | ratio | opp busy")
    for ph in sorted({r["phase"] for r in hp}):
        rs = [r for r in hp if r["phase"] == ph]
        al = [r["step_s"] for r in alone if r["phase"] == ph][2:]
        dyn = statistics.median(r["step_s"] for r in rs[2:] or rs)
        busy = run_pair.busy_share(opp, rs[0]["wall"] - rs[0]["step_s"], rs[-1]["wall"])
        med = statistics.median(al) if al else float("nan")
        print("%5d | %11.1f | %10.1f | %5.3f | %8.2f" % (ph, med * 1e3, dyn * 1e3, dyn / med,
                                                         busy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
