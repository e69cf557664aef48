#!/usr/bin/env python3
"""Runs one configuration of the two-jobs example and summarises it.

    run_pair.py --config dynamic|static|hp-alone|opp-alone --out DIR --budget 20G
                --hp-phases 32:40,96:40,192:40 --opp-batch 64 [--mode torch|sim]
                [--opp-seconds S] [--vmemctl PATH]

Starts the scheduler (dynamic, static) and the jobs (job.py) with their own
control and statistics files in DIR, each job with VMEM_LIMIT = the budget
(its start cap), VMEM_BACKEND (--backend; default vmm with --mode torch, sim-vmm
with --mode sim: a job cut below its live bytes, suspended or not, moves them to
host at its step boundary, where cuda/sim keep every region a live block sits in;
a job suspended at perf 0 applies a change at once, at its boundary) and, on
cuda/sim only, VMEM_CONTROL_IMMEDIATE=1.
Both jobs start together and get past their start-up (job.py --ready-file).
Then the opportunistic job starts first (once the scheduler has granted it
memory: a limit above 0 in its control file, applied) and runs
--opp-warmup-steps steps: its first step loads its kernels (0.8 s on the H100,
where it slowed a third of the high-priority job's first phase in run 3);
the high-priority job's first step then starts the clock, so that neither
job's start-up is in the figures.  The opportunistic job stops when the
high-priority job ends (opp-alone: --opp-seconds after its warm-up steps).
Throughput is samples per second of the high-priority job's run (opp-alone:
of its own run after its warm-up steps), the same window for both jobs of a
pair; steps before the window are not counted.  Writes DIR/summary.json:
steps, samples/s, step times per phase, spills and failures of each job, and
for a pair, per phase of the high-priority job, the opportunistic job's steps,
the share of the phase it spent in a step, and its median perf.
hp-opp-idle (a diagnostic): both jobs, no scheduler; the opportunistic job
runs its warm-up steps at half the budget and is then suspended (perf 0) for
the whole run, so the high-priority job runs alone on the GPU beside an idle
second process.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scheduler import parse_size, read_stats  # noqa: E402


def read_log(path):
    """A job's JSON lines (job.py --log), plain or gzipped (.gz)."""
    out = []
    try:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by the end of the run
    except OSError:
        pass
    return out


def summarise(rows, t_start, t_end):
    """One job's figures over the window [t_start, t_end] (rows: the steps
    that ended in it)."""
    if not rows:
        return {"steps": 0, "samples_per_s": 0.0}
    span = max(t_end - t_start, 1e-9)
    phases = {}
    for r in rows:
        phases.setdefault(r["phase"], []).append(r)
    per_phase = []
    for ph in sorted(phases):
        rs = phases[ph]
        settled = [r["step_s"] for r in rs[2:] or rs]  # the batch change left out
        per_phase.append({
            "phase": ph, "batch": rs[0]["batch"], "steps": len(rs),
            "median_step_s": statistics.median(settled),
            "mean_step_s": statistics.mean(r["step_s"] for r in rs),
            "mean_settled_step_s": statistics.mean(settled),
            "spilled_steps": sum(1 for r in rs if r["host_max"] > 0),
            "peak_bytes": max(r["dev_max"] + r["host_max"] for r in rs)})
    return {
        "steps": len(rows),
        "samples": sum(r["batch"] for r in rows),
        "samples_per_s": sum(r["batch"] for r in rows) / span,
        "seconds": span,
        "spilled_steps": sum(1 for r in rows if r["host_max"] > 0),
        "spilled_bytes": rows[-1]["spilled"],
        "failures": rows[-1]["failures"],
        "phases": per_phase,
    }


def busy_share(rows, start, end):
    """The share of [start, end] that rows' steps (each ending at its wall
    time, step_s long) cover: the other job's time on the GPU in a phase."""
    covered = sum(max(0.0, min(end, r["wall"]) - max(start, r["wall"] - r["step_s"]))
                  for r in rows)
    return covered / (end - start) if end > start else 0.0


def add_opp_per_phase(hp_summary, hp_rows, opp_rows):
    """Per phase of the high-priority job: the opportunistic job's steps
    ended in it, the share of its time the opportunistic job was in a step
    (contention for the GPU), and its median perf (share) in force."""
    for ph in hp_summary.get("phases", []):
        rs = [r for r in hp_rows if r["phase"] == ph["phase"]]
        start, end = rs[0]["wall"] - rs[0]["step_s"], rs[-1]["wall"]
        os_ = [r for r in opp_rows if start < r["wall"] <= end]
        ph["opp_steps"] = len(os_)
        ph["opp_busy"] = busy_share(opp_rows, start, end)
        ph["opp_perf_median"] = statistics.median(r["perf"] for r in os_) if os_ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True,
                    choices=["dynamic", "static", "hp-alone", "opp-alone", "hp-opp-idle"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", required=True)
    ap.add_argument("--hp-phases", required=True)
    ap.add_argument("--opp-batch", type=int, required=True)
    ap.add_argument("--opp-seconds", type=float, default=30)
    ap.add_argument("--opp-warmup-steps", type=int, default=1,
                    help="steps the opportunistic job runs before the clock starts (>= 1)")
    ap.add_argument("--hp-max-seconds", type=float, default=0,
                    help="cap on the high-priority job's run (0: none)")
    ap.add_argument("--mode", choices=["torch", "sim"], default="torch")
    ap.add_argument("--backend", default="",
                    help="VMEM_BACKEND of the jobs (default vmm, sim-vmm with --mode sim: a "
                    "cut below a job's live bytes moves them to host; cuda/sim cannot)")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--vmemctl", default=os.environ.get("VMEMCTL", "vmemctl"))
    ap.add_argument("--scheduler-args", default="", help="extra arguments, space separated")
    a = ap.parse_args()
    if a.opp_warmup_steps < 1:
        ap.error("--opp-warmup-steps must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    files = {j: {k: os.path.join(a.out, "%s.%s" % (j, k))
                 for k in ("control.json", "stats.json", "log.jsonl", "stdout", "ready", "go")}
             for j in ("hp", "opp")}
    done = os.path.join(a.out, "hp.done")
    for f in [done] + [p for j in files.values() for p in j.values()]:
        if os.path.exists(f):
            os.unlink(f)

    def env_for(job):
        e = dict(os.environ)
        e.update(VMEM_LIMIT=a.budget, VMEM_BACKEND=a.backend or
                 ("vmm" if a.mode == "torch" else "sim-vmm"),
                 VMEM_CONTROL_FILE=files[job]["control.json"],
                 VMEM_STATS_FILE=files[job]["stats.json"])
        # vmm moves memory only at step boundaries (a suspended job's
        # included); cuda/sim give back empty regions at once
        if e["VMEM_BACKEND"] in ("cuda", "sim"):
            e["VMEM_CONTROL_IMMEDIATE"] = "1"
        if a.mode == "sim":
            e.setdefault("VMEM_SIM_CAPACITY", "64G")
        return e

    def job(name, extra):
        cmd = [sys.executable, os.path.join(HERE, "job.py"), "--mode", a.mode, "--name", name,
               "--model", a.model, "--image-size", str(a.image_size),
               "--log", files[name]["log.jsonl"], "--ready-file", files[name]["ready"],
               "--start-file", files[name]["go"]] + extra
        return subprocess.Popen(cmd, env=env_for(name),
                                stdout=open(files[name]["stdout"], "w"), stderr=subprocess.STDOUT)

    sched = None
    if a.config in ("dynamic", "static"):
        cmd = [sys.executable, os.path.join(HERE, "scheduler.py"), "--budget", a.budget,
               "--hp", files["hp"]["control.json"], files["hp"]["stats.json"],
               "--opp", files["opp"]["control.json"], files["opp"]["stats.json"],
               "--mode", a.config, "--vmemctl", a.vmemctl, "--until", done,
               "--log", os.path.join(a.out, "memory.csv")] + a.scheduler_args.split()
        sched = subprocess.Popen(cmd, stdout=open(os.path.join(a.out, "scheduler.stdout"), "w"),
                                 stderr=subprocess.STDOUT)
        time.sleep(0.5)  # its first decisions are in the control files before the jobs start

    procs = {}
    if a.config != "opp-alone":
        procs["hp"] = job("hp", ["--phases", a.hp_phases, "--max-seconds", str(a.hp_max_seconds),
                                 "--stop-file", done])
    if a.config != "hp-alone":
        procs["opp"] = job("opp", ["--batch", str(a.opp_batch), "--stop-file", done])
    # both past their start-up (import, model, CUDA context) before the clock starts
    while not all(os.path.exists(files[n]["ready"]) for n in procs):
        if any(p.poll() is not None for p in procs.values()):
            break
        time.sleep(0.02)
    if "opp" in procs:
        if sched:
            # its weights land under the limit the scheduler grants it, not
            # the 0 it holds before the first grant
            deadline = time.time() + 10
            while time.time() < deadline:
                ctl = read_stats(files["opp"]["control.json"]) or {}
                st = read_stats(files["opp"]["stats.json"])
                if ctl.get("limit", 0) > 0 and (st is None or st.get("limit") == ctl["limit"]):
                    break
                time.sleep(0.01)
        if a.config == "hp-opp-idle":  # no scheduler: half the budget, suspended after warm-up
            subprocess.run([a.vmemctl, "set", files["opp"]["control.json"], "limit",
                            str(parse_size(a.budget) // 2)], check=True, stdout=subprocess.DEVNULL)
        open(files["opp"]["go"], "w").close()
        # its warm-up steps (kernel loading) before the clock starts
        deadline = time.time() + 120
        while procs["opp"].poll() is None and time.time() < deadline and \
                len(read_log(files["opp"]["log.jsonl"])) < a.opp_warmup_steps:
            time.sleep(0.01)
        if a.config == "hp-opp-idle":
            subprocess.run([a.vmemctl, "set", files["opp"]["control.json"], "perf", "0"],
                           check=True, stdout=subprocess.DEVNULL)
            time.sleep(0.2)  # it ends the step it is in, then waits at its boundary
    t0 = t_opp = time.time()
    if "hp" in procs:
        open(files["hp"]["go"], "w").close()
    if "hp" in procs:
        procs["hp"].wait()
    else:
        time.sleep(a.opp_seconds)
    t_end = time.time()
    open(done, "w").close()
    if a.config == "hp-opp-idle":  # wake it so that it sees the stop file
        subprocess.run([a.vmemctl, "set", files["opp"]["control.json"], "perf", "100"],
                       stdout=subprocess.DEVNULL)
    rc = {}
    for name, p in procs.items():
        try:
            rc[name] = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc[name] = "killed"
    if sched:
        sched.wait(timeout=30)
    summary = {"config": a.config, "budget": a.budget, "mode": a.mode, "exit": rc,
               "seconds": t_end - t0}
    rows = {}
    for name in procs:
        start = t_opp if a.config == "opp-alone" else t0  # a pair: the same window
        rows[name] = [r for r in read_log(files[name]["log.jsonl"]) if start < r["wall"] <= t_end]
        summary[name] = summarise(rows[name], start, t_end)
        st = read_stats(files[name]["stats.json"])
        if st:  # the process's highest in-use bytes, a check on the per-step peaks
            summary[name]["lifetime_peak_bytes"] = st["devicePeakInUse"] + st["hostPeakInUse"]
    if "hp" in rows and "opp" in rows:
        add_opp_per_phase(summary["hp"], rows["hp"], rows["opp"])
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    return 0 if all(v == 0 for v in rc.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
