#!/usr/bin/env python3
"""Tests of scripts/layout_oracle.py: layouts are valid, never below the peak
of live bytes, and the exhaustive optimum agrees with a brute force over
offsets on small random instances.  Usage: test_layout_oracle.py ORACLE.py DATA_DIR"""
import importlib.util
import itertools
import json
import os
import random
import subprocess
import sys


def load_module(path):
    spec = importlib.util.spec_from_file_location("layout_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def peak_live(blocks):
    return max(sum(s for a, e, s in blocks if a <= t < e) for t in {a for a, _, _ in blocks})


def brute_force(blocks, unit):
    """Lowest top over all offsets that are multiples of unit."""
    limit = sum(s for _, _, s in blocks)
    best = limit
    for offs in itertools.product(range(0, limit, unit), repeat=len(blocks)):
        top = max(o + s for o, (_, _, s) in zip(offs, blocks))
        if top >= best:
            continue
        ok = all(not (blocks[i][0] < blocks[j][1] and blocks[j][0] < blocks[i][1] and
                      offs[i] < offs[j] + blocks[j][2] and offs[j] < offs[i] + blocks[i][2])
                 for i, j in itertools.combinations(range(len(blocks)), 2))
        if ok:
            best = top
    return best


def main():
    oracle, data = sys.argv[1], sys.argv[2]
    mod = load_module(oracle)
    rng = random.Random(14)
    unit = 256
    for case in range(40):
        n = rng.randint(2, 4)
        blocks = []
        for _ in range(n):
            a = rng.randint(0, 6)
            blocks.append((a, a + rng.randint(1, 5), unit * rng.randint(1, 3)))
        opt = mod.optimum(blocks)
        assert opt == brute_force(blocks, unit), (case, blocks)
        assert opt >= peak_live(blocks), (case, blocks)
        for key in mod.ORDERS.values():
            for best in (False, True):
                order = sorted(blocks, key=key)
                offs, top = mod.place(order, best)
                mod.check(order, offs)
                assert top >= opt, (case, blocks, top, opt)
    trace = os.path.join(data, "trace_tinylm.txt.gz")
    out = subprocess.run([sys.executable, oracle, trace], check=True, capture_output=True,
                         text=True).stdout
    row = json.loads(out)
    assert row["peak_live"] > 0
    for name in mod.ORDERS:
        for fit in ("first", "best"):
            assert row[f"{name}_{fit}"] >= row["peak_live"], row
    print("layout oracle: ok")


if __name__ == "__main__":
    main()
