#!/usr/bin/env python3
"""An example scheduler for two jobs sharing one GPU through libvmem
(AntMan's high-priority + opportunistic pair; docs/kubernetes.md).

    scheduler.py --budget 20G --hp HP_CONTROL HP_STATS --opp OPP_CONTROL OPP_STATS
                 [--mode dynamic|static] [--log CSV] [--until FILE]

It uses nothing but the statistics files the jobs write at every step end
(VMEM_STATS_FILE) and `vmemctl set` on their control files (VMEM_CONTROL_FILE).
The budget is the device memory the two jobs may hold together.

dynamic (default): the high-priority job's need is the most it used in one
step (device + host bytes) over the last --window seconds.  The opportunistic
job gets what it needs (the most it used in one step, plus the headroom) out
of what the high-priority job does not need (budget - need - headroom); the
rest of the budget stays with the high-priority job, so that it grows into
free memory instead of spilling while a cut is on its way (H100 run 4: it
spilled 1 GiB for two steps at its first growth, at a limit of need +
headroom, with 1.9 GiB of the budget held by neither job).  When the
high-priority job grows (a step using more than the need known so far), the
opportunistic job's limit is cut at once if it must be, and it is suspended
(perf 0) while the high-priority job runs alone to give its step time alone
(the baseline): a step that spills because the memory granted is still being
freed is no new growth.  The opportunistic job also waits (perf 0) while what
it would get is less than the most it used in one step: it would spill every
step.  On libvmem's vmm backend a cut below its live bytes moves them to host
at its step boundary, suspended or not, so the memory moves at once.

The baseline is taken once the high-priority job's step time alone has
settled: --settle steps after the growth (and after any spilled step) are
left out, then the median of each --probe-steps steps is taken until two in a
row agree within --slo (at most --probe-windows of them); the baseline is the
lower of the two (the lowest, when none agree).  In H100 run 4 the four steps
after the first growth took 22-50 ms alone (median 35.8 ms, 1.37x the job's
step time alone in that phase): with that as the baseline the controller read
1.31x as 0.96x and gave the opportunistic job its whole share.

Then the opportunistic job runs again with a GPU time share (perf, libvmem's
pacing: it sleeps after each step so that its steps take perf% of the time)
set by a proportional controller on the high-priority job's slowdown: every
--decide steps, ratio = mean step time / baseline (--ratio-stat median: the
median, as through H100 run 8), and
    perf += gain * 100 * (1 + slo - ratio)
clamped to [--perf-min, 100]: a share that costs the high-priority job more
than --slo is taken away in proportion (ratio 1.30 at slo 0.05, gain 2: -50),
one that costs less is given back in proportion, and the floor keeps the
opportunistic job running while memory lets it (the halving controller of
H100 run 3 went 55 -> 5 and stayed there: 27 steps in 12 s).
Before the high-priority job's first step the opportunistic job runs at full
share in half the budget (the other half is the high-priority job's start).
Memory only moves where it is free: the high-priority job's limit is
budget - max(opportunistic limit, opportunistic held), the opportunistic
job's is never above budget - high-priority held.

static: each job gets half the budget, once.

Every --interval seconds one CSV line records both jobs' limits, held and
in-use bytes, host bytes and perf (for scripts/plot_two_jobs.py), and the
controller's state: the high-priority job's need, its baseline (ms), the
latest slowdown ratio and whether a probe is on.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

GiB = 1 << 30


def parse_size(text):
    t = text.strip().upper()
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if t.endswith(suffix):
            return int(t[:-1]) << shift
    return int(t)


def read_stats(path):
    """The statistics file as a dict, or None while it is missing."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Policy:
    """The decisions, apart from files and clocks (unit-tested in
    tests/control/test_two_jobs.py).  update() takes both jobs' latest
    statistics and the time, and returns (hp_limit, opp_limit, opp_perf)."""

    def __init__(self, budget, headroom, window=5.0, probe_steps=4, slo=0.05,
                 perf_start=30, perf_min=10, opp_min=0, gain=2.0, decide_steps=5,
                 settle_steps=2, probe_windows=4, ratio_stat="mean"):
        if not 0 < perf_min <= 100 or not 0 < perf_start <= 100:
            raise ValueError("perf_min and perf_start must be in 1..100")
        if gain <= 0 or decide_steps < 1:
            raise ValueError("gain must be > 0 and decide_steps >= 1")
        if ratio_stat not in ("mean", "median"):
            raise ValueError("ratio_stat must be mean or median")
        if probe_steps < 1 or probe_windows < 2 or settle_steps < 0:
            raise ValueError("probe_steps >= 1, probe_windows >= 2 and settle_steps >= 0")
        self.budget, self.headroom, self.window = budget, headroom, window
        self.probe_steps, self.slo = probe_steps, slo
        self.settle_steps, self.probe_windows = settle_steps, probe_windows
        self.perf_min, self.opp_min = perf_min, opp_min
        self.gain, self.decide_steps = gain, decide_steps
        # the mean sees contention that slows a minority of the steps (the
        # other job's bursts), which the median hides: H100 run 8, phase 0,
        # median 1.01x alone at share 100 while a third of the steps were
        # 1.1-1.6x and the mean 1.16x
        self.ratio_stat = statistics.mean if ratio_stat == "mean" else statistics.median
        self.perf_run = max(perf_min, perf_start)  # the opportunistic job's share while it runs
        self.samples = []           # (time, bytes used) of the high-priority job's steps
        self.last_step = -1
        self.need = 0
        self.baseline = None        # high-priority step seconds alone
        self.ratio = None           # its latest mean (or median) step time over the baseline
        self.grows = 0
        self.opp_need = 0           # the most the opportunistic job used in one step
        self.opp_fits = True
        self._probe()               # the first baseline, before the opportunistic job runs

    @property
    def opp_perf(self):
        # it waits while the high-priority job takes its baseline, and while
        # its working set does not fit in what it is given: spilling every
        # step it would crawl and still take GPU time from the other job
        if self.last_step <= 0:
            return 100  # the high-priority job has not run a step: the GPU is free
        return 0 if self.probing or not self.opp_fits else self.perf_run

    def _probe(self):
        """Suspend the opportunistic job and take a new baseline."""
        self.probing = True
        self.settle_left = self.settle_steps
        self.windows = []           # medians of the probe's windows
        self.recent = []

    def _probe_step(self, step_s):
        """One high-priority step alone, on the device only."""
        if self.settle_left > 0:
            # the steps just after the cut or a spill: the opportunistic job
            # may still be ending its step, the grown job settling
            self.settle_left -= 1
            return
        self.recent.append(step_s)
        if len(self.recent) < self.probe_steps:
            return
        self.windows.append(statistics.median(self.recent))
        self.recent = []
        last = self.windows[-2:]
        agree = len(last) == 2 and max(last) <= min(last) * (1.0 + self.slo)
        if agree or len(self.windows) >= self.probe_windows:
            self.baseline = min(last) if agree else min(self.windows)
            self.probing = False

    def _hp_step(self, hp, now):
        self.last_step = hp.get("steps", 0)
        used = hp["deviceMemUsedMax"] + hp["hostMemUsedMax"]
        spilled = hp["hostMemUsedMax"] > 0
        # growth: more bytes in a step than the need known so far.  A step
        # that spills without growing (the memory it was granted is still
        # being freed by the other job) is no new growth: restarting the
        # probe on it kept the opportunistic job suspended, and unable to
        # reach the step end that would apply its cut, for a whole phase
        # (H100 run 2).  Such steps count in no step-time figure either,
        # and the probe settles again after them.
        grew = used > self.need * 1.05 + (64 << 20) if self.need else spilled
        self.samples.append((now, used))
        step_s = hp["miniBatchDuration"] * 1e-6
        if grew:
            self.grows += 1
            self._probe()
        elif spilled:
            if self.probing:
                self.settle_left = self.settle_steps
                self.recent = []
        elif self.probing:
            self._probe_step(step_s)
        else:
            self.recent.append(step_s)
            if len(self.recent) >= self.decide_steps:
                self.ratio = self.ratio_stat(self.recent) / self.baseline
                self.perf_run = self.control(self.perf_run, self.ratio)
                self.recent = []

    def control(self, perf, ratio):
        """The next share from the current one and the high-priority job's
        slowdown (its mean or median step time over its baseline)."""
        step = self.gain * 100.0 * (1.0 + self.slo - ratio)
        return int(min(100, max(self.perf_min, round(perf + step))))

    def update(self, hp, opp, now):
        if hp is not None and hp.get("steps", 0) != self.last_step and hp.get("steps", 0) > 0:
            self._hp_step(hp, now)
        if opp is not None and opp.get("steps", 0) > 0:
            self.opp_need = max(self.opp_need,
                                opp.get("deviceMemUsedMax", 0) + opp.get("hostMemUsedMax", 0))
        kept = [(t, u) for t, u in self.samples if now - t <= self.window]
        self.samples = kept or self.samples[-1:]
        self.need = max((u for _, u in self.samples), default=0)

        hp_held = hp["deviceHeld"] if hp else 0
        opp_held = opp["deviceHeld"] if opp else 0
        if self.last_step <= 0:
            # before its first step the high-priority job is promised half
            # the budget (its start); the opportunistic job gets the rest
            target = max(self.headroom, self.budget - self.budget // 2)
        else:
            target = self.need + self.headroom if self.need else self.budget
        free = max(self.opp_min, self.budget - target)
        self.opp_fits = not self.opp_need or free >= self.opp_need
        # the opportunistic job gets what it needs of what is free; the rest
        # stays with the high-priority job, room to grow without a cut
        want_opp = free
        if self.opp_need and self.last_step > 0:
            want_opp = min(free, max(self.opp_min, self.opp_need + self.headroom))
        # memory moves only where it is free
        opp_limit = max(self.opp_min, min(want_opp, self.budget - hp_held))
        hp_limit = min(self.budget - want_opp, self.budget - max(opp_limit, opp_held))
        return max(hp_limit, 0), opp_limit, self.opp_perf


class Job:
    def __init__(self, name, control, stats, vmemctl):
        self.name, self.control, self.stats, self.vmemctl = name, control, stats, vmemctl
        self.written = {}

    def set(self, key, value):
        """vmemctl set, only when the value changes."""
        if self.written.get(key) == value:
            return
        subprocess.run([self.vmemctl, "set", self.control, key, str(value)], check=True,
                       stdout=subprocess.DEVNULL)
        self.written[key] = value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", required=True, type=parse_size)
    ap.add_argument("--hp", nargs=2, required=True, metavar=("CONTROL", "STATS"))
    ap.add_argument("--opp", nargs=2, required=True, metavar=("CONTROL", "STATS"))
    ap.add_argument("--mode", choices=["dynamic", "static"], default="dynamic")
    ap.add_argument("--headroom", type=parse_size, default=None,
                    help="bytes kept free for the high-priority job (default: budget/16)")
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--probe-steps", type=int, default=4,
                    help="high-priority steps per probe window (their median)")
    ap.add_argument("--probe-windows", type=int, default=4,
                    help="most probe windows before the baseline is taken anyway")
    ap.add_argument("--settle", type=int, default=2,
                    help="steps left out of the probe after a growth or a spilled step")
    ap.add_argument("--slo", type=float, default=0.05)
    ap.add_argument("--perf", type=int, default=30, help="the opportunistic job's first share")
    ap.add_argument("--perf-min", type=int, default=10,
                    help="its floor share while memory lets it run")
    ap.add_argument("--gain", type=float, default=2.0,
                    help="share points per point of slowdown over 1+slo, times 100")
    ap.add_argument("--decide", type=int, default=5,
                    help="high-priority steps per share decision")
    ap.add_argument("--ratio-stat", choices=("mean", "median"), default="mean",
                    help="how those steps' times make the slowdown ratio")
    ap.add_argument("--vmemctl", default=os.environ.get("VMEMCTL", "vmemctl"))
    ap.add_argument("--log", help="CSV of both jobs over time")
    ap.add_argument("--until", help="stop once this file exists")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    a = ap.parse_args()

    hp = Job("hp", *a.hp, a.vmemctl)
    opp = Job("opp", *a.opp, a.vmemctl)
    headroom = a.headroom if a.headroom is not None else a.budget // 16
    try:
        policy = Policy(a.budget, headroom, a.window, a.probe_steps, a.slo, a.perf,
                        perf_min=a.perf_min, gain=a.gain, decide_steps=a.decide,
                        settle_steps=a.settle, probe_windows=a.probe_windows,
                        ratio_stat=a.ratio_stat)
    except ValueError as e:
        ap.error(str(e))
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("t,hp_limit,hp_held,hp_used,hp_host,opp_limit,opp_held,opp_used,opp_host,"
                  "opp_perf,hp_need,hp_base_ms,hp_ratio,probing\n")
    if a.mode == "static":
        hp.set("limit", a.budget // 2)
        opp.set("limit", a.budget // 2)
        opp.set("perf", 100)
    t0 = time.time()
    while not (a.until and os.path.exists(a.until)) and not (a.seconds and
                                                             time.time() - t0 > a.seconds):
        hs, os_ = read_stats(hp.stats), read_stats(opp.stats)
        now = time.time() - t0
        if a.mode == "dynamic":
            hp_limit, opp_limit, perf = policy.update(hs, os_, now)
            if perf == 0:
                # suspended first: the job ends its step on the memory it
                # has, then takes the cut at its step boundary (on vmm its
                # live blocks move to host there, suspended)
                opp.set("perf", perf)
            # cut first, then grant: the order keeps the sum within the budget
            if opp.written.get("limit", 1 << 62) > opp_limit:
                opp.set("limit", opp_limit)
                hp.set("limit", hp_limit)
            else:
                hp.set("limit", hp_limit)
                opp.set("limit", opp_limit)
            opp.set("perf", perf)
        if log:
            def g(s, k):
                return s.get(k, 0) if s else 0
            log.write("%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%.3f,%d\n" % (
                now, g(hs, "limit"), g(hs, "deviceHeld"), g(hs, "deviceMemUsedMax"),
                g(hs, "hostMemUsedMax"), g(os_, "limit"), g(os_, "deviceHeld"),
                g(os_, "deviceMemUsedMax"), g(os_, "hostMemUsedMax"), g(os_, "perf"),
                policy.need, (policy.baseline or 0) * 1e3, policy.ratio or 0,
                int(policy.probing)))
            log.flush()
        time.sleep(a.interval)
    opp.set("perf", 100)  # never leave the opportunistic job suspended
    if log:
        log.close()
    print("scheduler: %d growth events" % policy.grows, file=sys.stderr)


if __name__ == "__main__":
    main()
