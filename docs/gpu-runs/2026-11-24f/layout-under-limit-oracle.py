#!/usr/bin/env python3
"""Study script (twenty-first session, CPU): how a settled cut step of a recorded trace packs.

    python3 layout-under-limit-oracle.py TRACE.txt.gz STEP ...

For each step: its peak live bytes against the limit in force, a first-fit-decreasing layout of
its blocks (per step, then cyclic: blocks that live into the next step keep their address), and
a plan made from step k followed in step k+1, blocks matched by allocation order, counting the
blocks that would collide. Sizes rounded to 256 bytes; granules not counted. Throw-away: read in
docs/placement.md, "A layout under a limit: what perfect knowledge packs to"."""
import gzip, sys
path = sys.argv[1]
ALIGN = 256
GR = 2 << 20
lines = gzip.open(path, 'rt').read().split('\n')
# parse into events with step index and limit
step = 0; ev = 0; limit = None
live = {}      # id -> (step, ev, size)
allocs = []    # (id, step, ev_in_step, size)
steps = {}     # step -> dict(limit, n_events, start_ev)
cur_ev_in_step = 0
blocks = []    # (id, a_step, a_ev, f_step, f_ev, size)
step_limit = {}
for ln in lines:
    p = ln.split()
    if not p: continue
    if p[0] == '#':
        if len(p) >= 3 and p[1] == 'limit': limit = int(p[2])
        continue
    if p[0] == 's':
        steps[step] = cur_ev_in_step
        step += 1; cur_ev_in_step = 0
        continue
    step_limit.setdefault(step, limit)
    if p[0] == 'a':
        size = (int(p[2]) + ALIGN - 1)//ALIGN*ALIGN
        live[p[1]] = (step, cur_ev_in_step, size)
    else:
        s0, e0, size = live.pop(p[1])
        blocks.append((s0, e0, step, cur_ev_in_step, size))
    cur_ev_in_step += 1
steps[step] = cur_ev_in_step
for k,(s0,e0,size) in live.items():
    blocks.append((s0, e0, 10**9, 0, size))

def overlap(iv, iv0):
    """Whether two blocks' lifetimes (lists of [from, to) intervals) meet."""
    return any(x < y2 and x2 < y for x, y in iv for x2, y2 in iv0)


def first_fit(items, placed):
    """Each (size, intervals) of items, in their order, at the lowest address free over its
    lifetime among the blocks placed so far (appended to placed); returns their addresses."""
    addrs = []
    for size, iv in items:
        confl = sorted((a0, a0 + s0) for a0, s0, iv0 in placed if overlap(iv, iv0))
        addr = 0
        for lo, hi in confl:
            if addr + size <= lo: break
            addr = max(addr, hi)
        placed.append((addr, size, iv)); addrs.append(addr)
    return addrs


def study(k):
    """Step k as a period: each block's intervals within [0, T) of step k."""
    T = steps[k]
    items = []
    for (s0, e0, s1, e1, size) in blocks:
        if s1 < k or s0 > k: continue
        if s0 < k and s1 > k: iv = [(0, T)]                      # lives through
        elif s0 < k and s1 == k: iv = [(0, e1)]                  # from before, freed in k
        elif s0 == k and s1 > k: iv = [(e0, T)]                  # made in k, lives on
        else: iv = [(e0, e1)]                                    # made and freed in k
        items.append((size, iv, s0 < k, s1 > k))
    # cyclic view: a block made in k living on (wrap) pairs with one from before freed in k
    # of the same size; we only report bounds here, packing each step on its own
    # peak live
    deltas = []
    for size, iv, _, _ in items:
        for a, b in iv:
            deltas.append((a, size)); deltas.append((b, -size))
    deltas.sort(key=lambda x: (x[0], x[1]))
    cur = peak = 0
    for t, d in deltas:
        cur += d; peak = max(peak, cur)
    through = sum(size for size, iv, b, a in items if iv == [(0, T)])
    # first fit, largest first, intervals checked against placed blocks
    placed = []  # (addr, size, iv)
    first_fit([(size, iv) for size, iv, _, _ in sorted(items, key=lambda x: -x[0])], placed)
    top = max(a + size for a, size, _ in placed)
    return T, step_limit.get(k), peak, through, top

for k in [int(x) for x in sys.argv[2:]]:
    T, lim, peak, through, top = study(k)
    lim = lim or 84465090560
    print("step %d: %d events, limit %.2f GB, peak live %.2f GB (%.3f of limit), live through %.2f GB, first-fit-decreasing top %.2f GB (%.3f of limit, %.3f of peak)" % (
        k, T, lim/1e9, peak/1e9, peak/lim, through/1e9, top/1e9, top/lim, top/peak))

def crossing(k):
    into = outof = 0; n_in = n_out = 0
    for (s0, e0, s1, e1, size) in blocks:
        if s0 < k and s1 == k: into += size; n_in += 1
        if s0 == k and s1 > k and s1 < 10**9: outof += size; n_out += 1
    return into, n_in, outof, n_out
for k in [int(x) for x in sys.argv[2:]]:
    i, ni, o, no = crossing(k)
    print("step %d: from the step before, freed in it: %d blocks, %.3f GB; made in it, freed in a later step: %d blocks, %.3f GB" % (k, ni, i/1e9, no, o/1e9))

def cyclic(k):
    T = steps[k]
    items = []
    for (s0, e0, s1, e1, size) in blocks:
        if s0 < k and s1 > k: items.append((size, [(0, T)]))
        elif s0 == k and s1 == k: items.append((size, [(e0, e1)]))
        elif s0 == k and s1 == k + 1: items.append((size, [(e0, T), (0, e1)]))
        elif s0 == k and s1 > k + 1: items.append((size, [(0, T)]))
    placed = []
    first_fit(sorted(items, key=lambda x: -x[0]), placed)
    return max(a + size for a, size, _ in placed)
print("cyclic (blocks crossing into the next step keep their address), first fit decreasing:")
for k in [int(x) for x in sys.argv[2:]]:
    T, lim, peak, through, top = study(k)
    lim = lim or 84465090560
    c = cyclic(k)
    print("step %d: top %.2f GB, %.3f of the limit, %.3f of peak live" % (k, c/1e9, c/lim, c/peak))

def step_items(k):
    """In-step and wrap blocks of step k in allocation order: (order, size, intervals)."""
    T = steps[k]
    out = []
    for (s0, e0, s1, e1, size) in blocks:
        if s0 == k and s1 == k: out.append((e0, size, [(e0, e1)]))
        elif s0 == k and s1 == k + 1: out.append((e0, size, [(e0, T), (0, e1)]))
        elif s0 == k and s1 > k + 1: out.append((e0, size, [(0, T)]))
    out.sort()
    return out

def plan(k):
    """The cyclic plan of step k: the blocks live through it stacked first, then its own blocks
    by first fit, largest first.  Returns each own block's address (by allocation order), the
    number of blocks stacked first, and every placement (addr, size, intervals)."""
    T = steps[k]
    fixed = [(size, [(0, T)]) for (s0, e0, s1, e1, size) in blocks if s0 < k and s1 > k + 1]
    its = step_items(k)
    order = sorted(range(len(its)), key=lambda i: -its[i][1])
    placed = []
    base = 0
    for size, iv in sorted(fixed, key=lambda x: -x[0]):  # fixed first, stacked
        placed.append((base, size, iv)); base += size
    addrs = first_fit([its[i][1:] for i in order], placed)
    return dict(zip(order, addrs)), len(fixed), placed

print("a plan from step k followed in step k+1 (blocks matched by allocation order):")
for k in [int(x) for x in sys.argv[2:]]:
    addr_of, nfixed, placed = plan(k)
    fixed, top = placed[:nfixed], max(a + s for a, s, _ in placed)
    nxt = step_items(k + 1)
    cur = step_items(k)
    if len(nxt) != len(cur) or any(a[1] != b[1] for a, b in zip(cur, nxt)):
        print("step %d -> %d: sizes differ" % (k, k + 1)); continue
    placed = list(fixed)
    bad = badb = 0
    for i, (_, size, iv) in enumerate(nxt):
        a = addr_of[i]
        hit = any(a < a0 + s0 and a0 < a + size and overlap(iv, iv0) for a0, s0, iv0 in placed)
        if hit: bad += 1; badb += size
        placed.append((a, size, iv))
    print("step %d -> %d: plan top %.2f GB; %d of %d blocks collide in the next step (%.3f GB)" % (
        k, k + 1, top / 1e9, bad, len(nxt), badb / 1e9))

def mapped_peak(k):
    """The cyclic plan of step k (plan), and the most 2 MiB granules its live blocks touch at
    any moment: the device memory a range laid out this way must have mapped."""
    _, _, placed = plan(k)
    evs = []
    for a, size, iv in placed:
        g0, g1 = a // GR, (a + size - 1) // GR + 1
        for x, y in iv:
            evs.append((x, 1, g0, g1)); evs.append((y, -1, g0, g1))
    evs.sort(key=lambda e: (e[0], e[1]))
    ref = {}
    cur = peak = 0
    for t, d, g0, g1 in evs:
        for g in range(g0, g1):
            c = ref.get(g, 0)
            if d > 0 and c == 0: cur += 1
            if d < 0 and c == 1: cur -= 1
            ref[g] = c + d
        peak = max(peak, cur)
    return peak * GR, max(a + s for a, s, _ in placed)
print("granules (2 MiB) the cyclic plan keeps mapped at its worst moment:")
for k in [int(x) for x in sys.argv[2:]]:
    T, lim, peak, through, top = study(k)
    lim = lim or 84465090560
    m, t = mapped_peak(k)
    print("step %d: %.2f GB mapped at most (%.3f of the limit; peak live %.2f GB), range top %.2f GB" % (
        k, m / 1e9, m / lim, peak / 1e9, t / 1e9))
