#!/usr/bin/env python3
"""Replays a trace recorded by libvmem (VMEM_TRACE_FILE) through libvmem on
a simulated device, applying its limit changes where they were made, and
prints what the device arena did in each step: the study of a cut job's
mappings without a GPU (docs/placement.md, "The arena's moves in a cut
step, replayed").

    VMEM_BACKEND=sim-vmm python3 bench/replay_recorded.py TRACE.txt[.gz] [--json]

vmem-replay takes one limit for a whole trace; this takes the recorded
'# limit <bytes> <t_us>' lines (vmem_set_limit) as they come.  Every other
setting comes from the environment as for any libvmem program (VMEM_REMAP,
VMEM_PLACEMENT, VMEM_SIM_CAPACITY ...).  One line per step: its limit, the
remaps (bytes), the regions mapped and given back, the device
synchronisations those would have been on a GPU, the bytes placed on host,
and what the device held at the end.  --why also prints each allocation
that remapped: its step, its number in the step, its size and the bytes
moved for it.  --addresses also counts, per step, the allocations placed
at another offset than the recorded run placed them (a trace written by
VMEM_TRACE_FILE names each block by its address; offsets are taken from
the first allocation of each run): where the counts leave zero, the
simulated device stopped modelling the recorded one (the GPU's 512 MiB
handles, say, or a placement rule chosen by time), and its figures from
there on are the model's, not the run's.
"""
import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import libvmem as L  # noqa: E402
import libvmem_offload  # noqa: E402

COUNTERS = ("device_region_allocs", "device_region_frees", "placed_host_bytes",
            "fallback_bytes", "moved_to_host_bytes")
JSON_COUNTERS = ("deviceRemaps", "deviceRemappedBytes", "deviceRemapRefusals", "deviceSyncs")


def events(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        for n, line in enumerate(f, 1):
            p = line.split()
            if not p:
                continue
            if p[0] == "#":
                if len(p) >= 3 and p[1] == "limit":
                    yield ("limit", int(p[2]))
                continue
            if p[0] == "a" and len(p) == 5:
                yield ("a", int(p[1]), int(p[2]), int(p[3]))
            elif p[0] == "f" and len(p) == 3:
                yield ("f", int(p[1]))
            elif p[0] == "s":
                yield ("s",)
            else:
                raise SystemExit("%s:%d: not a trace line: %r" % (path, n, line))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true", help="one JSON object per step")
    ap.add_argument("--why", action="store_true",
                    help="print each allocation that remapped (slower: stats per allocation)")
    ap.add_argument("--addresses", action="store_true",
                    help="count the allocations placed at another offset than in the "
                         "recorded run (traces written by VMEM_TRACE_FILE)")
    a = ap.parse_args(argv)
    lib = L.load()
    read = libvmem_offload._stats_reader(L)
    streams = {}
    live = {}

    def snap():
        s = read(0)
        j = L.stats()
        out = {k: getattr(s, k) for k in COUNTERS}
        out.update({k: j.get(k, 0) for k in JSON_COUNTERS})
        out["device_held"] = s.device_held
        out["limit"] = s.limit
        return out
    L.stats()  # creates the instance
    before = snap()
    step = 0
    failed = 0
    nth = 0  # allocations in the step so far
    rows = []
    base = None  # (recorded address, replayed address) of the first allocation
    moved_off = 0  # allocations of the step at another offset
    first_off = None  # the first of them: (its number in the step, size)
    for ev in events(a.trace):
        if ev[0] == "a":
            stream = streams.setdefault(ev[3], 0x1000 * (len(streams) + 1) if ev[3] else 0)
            nth += 1
            moved = L.stats()["deviceRemappedBytes"] if a.why else 0
            p = lib.vmem_torch_malloc(ev[2], 0, stream or None)
            if a.why:
                moved = L.stats()["deviceRemappedBytes"] - moved
                if moved:
                    print("step %d allocation %d of %.3f GB: %.3f GB remapped for it"
                          % (step, nth, ev[2] / 1e9, moved / 1e9))
            if not p:
                failed += 1
                continue
            if a.addresses:
                if base is None:
                    base = (ev[1], p)
                if p - base[1] != ev[1] - base[0]:
                    moved_off += 1
                    if first_off is None:
                        first_off = (nth, ev[2])
            live[ev[1]] = (p, ev[2], stream)
        elif ev[0] == "f":
            blk = live.pop(ev[1], None)
            if blk:
                lib.vmem_torch_free(blk[0], blk[1], 0, blk[2] or None)
        elif ev[0] == "limit":
            L.set_limit(ev[1], force=True)
        else:
            L.step_end()
            now = snap()
            row = {"step": step, "limit": now["limit"], "failed": failed,
                   "live": sum(b[1] for b in live.values()),
                   "device_held": now["device_held"]}
            for k in COUNTERS + JSON_COUNTERS:
                row[k] = now[k] - before[k]
            if a.addresses:
                row["other_offset"] = moved_off
                row["first_other"] = list(first_off) if first_off else None
            rows.append(row)
            before = now
            step += 1
            failed = 0
            nth = 0
            moved_off, first_off = 0, None
            if a.json:
                print(json.dumps(row))
            else:
                where = ""
                if a.addresses:
                    where = "; %d at another offset than recorded" % row["other_offset"]
                    if row["first_other"]:
                        where += " (first: allocation %d, %.3f GB)" % (
                            row["first_other"][0], row["first_other"][1] / 1e9)
                print("step %2d limit %6.2f GB: %3d remaps (%5.2f GB, %d refused), %3d regions "
                      "mapped, %3d given back, %2d syncs; host %5.2f GB placed, %5.2f GB fallback; "
                      "held %6.2f GB%s"
                      % (step - 1, row["limit"] / 1e9, row["deviceRemaps"],
                         row["deviceRemappedBytes"] / 1e9, row["deviceRemapRefusals"],
                         row["device_region_allocs"], row["device_region_frees"],
                         row["deviceSyncs"], row["placed_host_bytes"] / 1e9,
                         row["fallback_bytes"] / 1e9, row["device_held"] / 1e9,
                         ", %d failed" % row["failed"] if row["failed"] else "") + where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
