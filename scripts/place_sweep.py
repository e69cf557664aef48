#!/usr/bin/env python3
"""Planned against naive placement on synthetic traces (scripts/synth_trace.py).

usage: place_sweep.py KINDS SEEDS [VMEM_REPLAY]
  KINDS  comma-separated synth_trace.py kinds, e.g. repeat,vary,struct
  SEEDS  traces per kind (seeds 0..SEEDS-1)
For each trace, at limits of 50% and 75% of its peak live bytes (sim-vmm),
compares the host bytes of each step (spilled_bytes_steps) under
`--placement planned` and `--placement naive`, leaving out step 0 and the
partial step at the end.  Prints per kind: steps compared, steps where planned
put more on host than naive, the largest such ratio, the median ratio, the
ratio of the totals, and up to 12 of the worse steps as (seed, limit, step,
ratio)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def replay(binary, trace, *args):
    p = subprocess.run([binary, "--backend", "sim-vmm", "--repeat", "1", *args, trace],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[0])


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    kinds, seeds = sys.argv[1].split(","), range(int(sys.argv[2]))
    binary = sys.argv[3] if len(sys.argv) == 4 else \
        os.path.join(HERE, "..", "build", "bench", "vmem-replay")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            worse = total = 0
            largest, ratios, sum_p, sum_n, bad = 0.0, [], 0, 0, []
            for seed in seeds:
                trace = os.path.join(tmp, f"{kind}-{seed}.txt.gz")
                subprocess.run([sys.executable, os.path.join(HERE, "synth_trace.py"), kind,
                                str(seed), trace], check=True)
                live = replay(binary, trace)["peak_live"]
                for frac in (0.5, 0.75):
                    lim = str(int(live * frac))
                    ns = replay(binary, trace, "--limit", lim, "--placement", "naive")
                    ps = replay(binary, trace, "--limit", lim)
                    ns, ps = ns["spilled_bytes_steps"], ps["spilled_bytes_steps"]
                    for i, (n, p) in enumerate(zip(ns, ps)):
                        if i == 0 or i == len(ns) - 1:
                            continue
                        total += 1
                        sum_p += p
                        sum_n += n
                        if n:
                            ratios.append(p / n)
                        if p > n:
                            worse += 1
                            r = p / n if n else float("inf")
                            largest = max(largest, r)
                            bad.append((seed, frac, i, round(r, 2)))
            med = statistics.median(ratios) if ratios else 0.0
            print(f"{kind:8s} steps {total:4d} worse {worse:3d} max {largest:.2f} "
                  f"median {med:.2f} total p/n {sum_p / max(sum_n, 1):.3f}  {bad[:12]}")


main()
