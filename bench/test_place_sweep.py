#!/usr/bin/env python3
"""scripts/place_sweep.py on a few generated traces (docs/placement.md,
"Synthetic traces"): the tools run, and two properties of the planner hold on
them: traces with no repeating structure (infer) are never planned above
naive, and on repeating ones (repeat) the plans put less on host than naive
placement in total.

usage: test_place_sweep.py PLACE_SWEEP_PY VMEM_REPLAY"""
import re
import subprocess
import sys


def main():
    sweep, replay = sys.argv[1], sys.argv[2]
    out = subprocess.run([sys.executable, sweep, "repeat,infer", "4", replay],
                         capture_output=True, text=True, check=True).stdout
    print(out, end="")
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(\w+)\s+steps\s+(\d+) worse\s+(\d+) max ([\d.inf]+) median ([\d.]+) "
                     r"total p/n ([\d.]+)", line)
        assert m, f"unexpected line: {line!r}"
        rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), float(m.group(6)))
    assert set(rows) == {"repeat", "infer"}, rows
    for kind, (steps, _, _) in rows.items():
        assert steps > 0, f"{kind}: no step compared"
    assert rows["infer"][1] == 0, "infer: a step planned above naive"
    assert rows["repeat"][2] < 0.9, f"repeat: planned / naive {rows['repeat'][2]} in total"
    print("ok")


main()
