#!/usr/bin/env python3
"""An example scheduler for two jobs sharing one GPU through libvmem
(AntMan's high-priority + opportunistic pair; docs/kubernetes.md).

    scheduler.py --budget 20G --hp HP_CONTROL HP_STATS --opp OPP_CONTROL OPP_STATS
                 [--mode dynamic|static] [--log CSV] [--until FILE]

It uses nothing but the statistics files the jobs write at every step end
(VMEM_STATS_FILE) and `vmemctl set` on their control files (VMEM_CONTROL_FILE).
The budget is the device memory the two jobs may hold together.

dynamic (default): the opportunistic job gets what the high-priority job does
not use: budget - (the high-priority job's need + headroom), where the need is
the most the high-priority job used in one step (device + host bytes) over the
last --window seconds.  When the high-priority job grows (it spills to host, or
its need rises), the opportunistic job's limit is cut at once and it is
suspended (perf 0) while the high-priority job runs --probe-steps steps alone,
which gives its step time alone (the baseline); growth is a step using more than
the need known so far (a step that spills because the memory granted is still
being freed is not).  The opportunistic job also waits (perf 0) while what it
would get is less than the most it used in one step: it would spill every step.
On libvmem's vmm backend a cut below its live bytes moves them to host at its
step boundary, suspended or not, so the memory moves at once.  Then the
opportunistic job runs again with a GPU time share (perf, libvmem's pacing:
it sleeps after each step so that its steps take perf% of the time) set by a
proportional controller on the high-priority job's slowdown: every --decide
steps, ratio = median step time / baseline, and
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
in-use bytes, host bytes and perf (for scripts/plot_two_jobs.py).
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
    tests/examples/test_two_jobs.py).  update() takes both jobs' latest
    statistics and the time, and returns (hp_limit, opp_limit, opp_perf)."""

    def __init__(self, budget, headroom, window=5.0, probe_steps=4, slo=0.05,
                 perf_start=30, perf_min=10, opp_min=0, gain=2.0, decide_steps=5):
        if not 0 < perf_min <= 100 or not 0 < perf_start <= 100:
            raise ValueError("perf_min and perf_start must be in 1..100")
        if gain <= 0 or decide_steps < 1:
            raise ValueError("gain must be > 0 and decide_steps >= 1")
        self.budget, self.headroom, self.window = budget, headroom, window
        self.probe_steps, self.slo = probe_steps, slo
        self.perf_min, self.opp_min = perf_min, opp_min
        self.gain, self.decide_steps = gain, decide_steps
        self.perf_run = max(perf_min, perf_start)  # the opportunistic job's share while it runs
        self.samples = []           # (time, bytes used) of the high-priority job's steps
        self.last_step = -1
        self.need = 0
        self.probing = True         # opportunistic job suspended, baseline being taken
        self.probe_from = 0         # high-priority step count when the probe began
        self.baseline = None        # high-priority step seconds alone
        self.recent = []
        self.grows = 0
        self.opp_need = 0           # the most the opportunistic job used in one step
        self.opp_fits = True

    @property
    def opp_perf(self):
        # it waits while the high-priority job takes its baseline, and while
        # its working set does not fit in what it is given: spilling every
        # step it would crawl and still take GPU time from the other job
        if self.last_step <= 0:
            return 100  # the high-priority job has not run a step: the GPU is free
        return 0 if self.probing or not self.opp_fits else self.perf_run

    def _grow(self, hp_steps):
        self.grows += 1
        self.probing = True
        self.probe_from = hp_steps
        self.recent = []

    def _hp_step(self, hp, now):
        self.last_step = hp.get("steps", 0)
        used = hp["deviceMemUsedMax"] + hp["hostMemUsedMax"]
        spilled = hp["hostMemUsedMax"] > 0
        # growth: more bytes in a step than the need known so far.  A step
        # that spills without growing (the memory it was granted is still
        # being freed by the other job) is no new growth: restarting the
        # probe on it kept the opportunistic job suspended, and unable to
        # reach the step end that would apply its cut, for a whole phase
        # (H100 run 2).  Such steps count in no step-time figure either.
        grew = used > self.need * 1.05 + (64 << 20) if self.need else spilled
        self.samples.append((now, used))
        step_s = hp["miniBatchDuration"] * 1e-6
        if grew:
            self._grow(self.last_step)
        elif spilled:
            pass
        elif self.probing:
            # the steps after the cut, alone and on the device only; the
            # first two after it may still run beside the opportunistic job
            if self.last_step - self.probe_from > 2:
                self.recent.append(step_s)
            if len(self.recent) >= self.probe_steps:
                self.baseline = statistics.median(self.recent)
                self.probing = False
                self.recent = []
        else:
            self.recent.append(step_s)
            if len(self.recent) >= self.decide_steps:
                ratio = statistics.median(self.recent) / self.baseline
                self.perf_run = self.control(self.perf_run, ratio)
                self.recent = []

    def control(self, perf, ratio):
        """The next share from the current one and the high-priority job's
        slowdown (its median step time over its baseline)."""
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
        want_opp = max(self.opp_min, self.budget - target)
        # memory moves only where it is free
        opp_limit = max(self.opp_min, min(want_opp, self.budget - hp_held))
        hp_limit = min(self.budget - want_opp, self.budget - max(opp_limit, opp_held))
        self.opp_fits = not self.opp_need or want_opp >= self.opp_need
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
    ap.add_argument("--probe-steps", type=int, default=4)
    ap.add_argument("--slo", type=float, default=0.05)
    ap.add_argument("--perf", type=int, default=30, help="the opportunistic job's first share")
    ap.add_argument("--perf-min", type=int, default=10,
                    help="its floor share while memory lets it run")
    ap.add_argument("--gain", type=float, default=2.0,
                    help="share points per point of slowdown over 1+slo, times 100")
    ap.add_argument("--decide", type=int, default=5,
                    help="high-priority steps per share decision (their median)")
    ap.add_argument("--vmemctl", default=os.environ.get("VMEMCTL", "vmemctl"))
    ap.add_argument("--log", help="CSV of both jobs over time")
    ap.add_argument("--until", help="stop once this file exists")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    a = ap.parse_args()

    hp = Job("hp", *a.hp, a.vmemctl)
    opp = Job("opp", *a.opp, a.vmemctl)
    headroom = a.headroom if a.headroom is not None else a.budget // 16
    policy = Policy(a.budget, headroom, a.window, a.probe_steps, a.slo, a.perf,
                    perf_min=a.perf_min, gain=a.gain, decide_steps=a.decide)
    log = open(a.log, "w") if a.log else None
    if log:
        log.write("t,hp_limit,hp_held,hp_used,hp_host,opp_limit,opp_held,opp_used,opp_host,"
                  "opp_perf,hp_need\n")
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
            log.write("%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n" % (
                now, g(hs, "limit"), g(hs, "deviceHeld"), g(hs, "deviceMemUsedMax"),
                g(hs, "hostMemUsedMax"), g(os_, "limit"), g(os_, "deviceHeld"),
                g(os_, "deviceMemUsedMax"), g(os_, "hostMemUsedMax"), g(os_, "perf"),
                policy.need))
            log.flush()
        time.sleep(a.interval)
    opp.set("perf", 100)  # never leave the opportunistic job suspended
    if log:
        log.close()
    print("scheduler: %d growth events" % policy.grows, file=sys.stderr)


if __name__ == "__main__":
    main()
