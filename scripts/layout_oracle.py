#!/usr/bin/env python3
"""Offline layout oracle for issue 14: how low can a planned block layout go?

Knowing every block's whole lifetime from the trace (perfect knowledge, no
allocator), lay out all blocks of a trace in one address range so that no two
blocks overlap in (address x lifetime), with the classic offline
dynamic-storage-allocation heuristics: blocks in some order, each at the
lowest address (first fit) or in the smallest gap (best fit) that is free over
its whole lifetime among the blocks placed so far.  The top of the layout over
the trace's peak live bytes is what a layout planned from the recorded steps
(docs/benchmarks.md, "A planned block layout") could reach at best with that
heuristic; no allocator can hold less than the peak live bytes.

    scripts/layout_oracle.py TRACE.txt.gz ...    one JSON line per trace

Each line: peak_live, and for each ordering x fit the layout's top and
top / peak_live (2 MiB granules and growth alignment not counted).
Sizes are rounded to 256 bytes as the engine does.
"""
import gzip
import itertools
import json
import sys

ALIGN = 256

ORDERS = {
    "size": lambda b: (-b[2], b[0]),               # largest first (ties: earliest)
    "life": lambda b: (-(b[1] - b[0]), -b[2]),     # longest-lived first
    "start": lambda b: (b[0],),                    # allocation order (what an allocator sees)
}


def load(path):
    """Blocks (alloc event, free event, rounded size) of a trace; blocks never
    freed live to the trace's end.  Also the peak of live bytes."""
    live_blocks, blocks = {}, []
    ev = live = peak = 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            w = line.split()
            if not w or w[0] not in ("a", "f"):
                continue
            if w[0] == "a":
                size = (int(w[2]) + ALIGN - 1) // ALIGN * ALIGN
                if w[1] in live_blocks:
                    raise ValueError(f"{path}: id {w[1]} allocated twice")
                live_blocks[w[1]] = (ev, size)
                live += size
                peak = max(peak, live)
            else:
                if w[1] not in live_blocks:
                    raise ValueError(f"{path}: free of unknown id {w[1]}")
                at, size = live_blocks.pop(w[1])
                blocks.append((at, ev, size))
                live -= size
            ev += 1
    blocks += [(at, ev, size) for at, size in live_blocks.values()]
    return blocks, peak


def place(blocks, best_fit=False):
    """Offsets for blocks placed in the given order; returns (offsets, top)."""
    placed = []  # (offset, end offset, alloc, free), kept sorted by offset
    offs, top = [], 0
    for at, end, size in blocks:
        occ = [(lo, hi) for lo, hi, a, e in placed if a < end and at < e]
        gaps, cur = [], 0
        for lo, hi in occ:  # sorted by lo
            if lo > cur:
                gaps.append((lo - cur, cur))
            cur = max(cur, hi)
        fit = [g for g in gaps if g[0] >= size]
        if not fit:
            off = cur
        elif best_fit:
            off = min(fit)[1]
        else:
            off = min(g[1] for g in fit)
        offs.append(off)
        top = max(top, off + size)
        k = 0
        while k < len(placed) and placed[k][0] < off:
            k += 1
        placed.insert(k, (off, off + size, at, end))
    return offs, top


def check(blocks, offs):
    """Raises if two blocks overlap in address and lifetime."""
    for i, j in itertools.combinations(range(len(blocks)), 2):
        (a1, e1, s1), (a2, e2, s2) = blocks[i], blocks[j]
        if a1 < e2 and a2 < e1 and offs[i] < offs[j] + s2 and offs[j] < offs[i] + s1:
            raise AssertionError(f"blocks {i} and {j} overlap")


def optimum(blocks):
    """Lowest top over every order with first fit (exhaustive: tiny inputs
    only).  Placing blocks in the order of their offsets in an optimal layout
    with first fit puts none higher than there, so this is the optimum."""
    return min(place(list(p))[1] for p in itertools.permutations(blocks))


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in argv[1:]:
        blocks, peak = load(path)
        out = {"trace": path.rsplit("/", 1)[-1], "blocks": len(blocks), "peak_live": peak}
        for name, key in ORDERS.items():
            order = sorted(blocks, key=key)
            for best in (False, True):
                _, top = place(order, best)
                tag = f"{name}_{'best' if best else 'first'}"
                out[tag] = top
                out[tag + "_ratio"] = round(top / peak, 4) if peak else None
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
