#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus (tests/fuzz/corpus/) from the shared traces.

    python3 tests/fuzz/make_corpus.py [--traces DIR] [--out DIR]

Each seed is a window of a real PyTorch allocation trace turned into the
input format of fuzz_ops.c: a configuration byte, then one "alloc exact size"
operation per allocation and one "free live block i" per free, with the
harness's live list mirrored here (it removes by swapping with the last
block) so that frees name the block the trace frees.  Sizes are scaled down
so the windows fit the simulated devices; some seeds add step ends, trims and
limit changes between events.  The output is deterministic and small (well
under 1 MiB in total).
"""
import argparse
import gzip
import os
import struct
import sys

# Opcodes and encodings: keep in sync with fuzz_ops.c.
OP_ALLOC = 0            # [0, 100): size class byte, 4 size bytes
OP_FREE = 100           # [100, 170): 2 bytes, index into the live list
OP_SET_LIMIT = 196      # [196, 206): kind, 2 bytes x, flags
OP_STEP_END = 206       # [206, 212)
OP_TRIM = 212           # [212, 217)
SIZE_EXACT = 0xE0       # size class 7: the 4 bytes are the size
LIMIT_HALF = 8          # set-limit kind: the current limit / 2
LIMIT_GROW = 1          # set-limit kind: held + (x % 8) granules
LIMIT_CAP = 4           # set-limit kind: the start cap


def config_byte(vmm, capacity, limit, fallback_off=False, host=0):
    """capacity/limit/host: indexes into the tables of shadow_open()."""
    return (vmm & 1) | (capacity << 1) | (limit << 3) | (int(fallback_off) << 5) | (host << 6)


def read_trace(path):
    events = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.split()
            if p[0] == "a":
                events.append(("a", int(p[1]), int(p[2])))
            elif p[0] == "f":
                events.append(("f", int(p[1])))
    return events


def encode(events, start, count, scale, cfg, step_every=0, limit_every=0):
    out = bytearray([cfg])
    live = []               # ids, in the harness's order
    index = {}              # id -> position in live
    n = 0
    for ev in events[start:start + count]:
        if ev[0] == "a":
            if len(live) >= 2000:
                continue
            size = max(1, ev[2] // scale)
            out += bytes([OP_ALLOC, SIZE_EXACT]) + struct.pack("<I", min(size, 0xFFFFFFFF))
            index[ev[1]] = len(live)
            live.append(ev[1])
        else:
            i = index.pop(ev[1], None)
            if i is None:
                continue    # allocated before the window
            out += bytes([OP_FREE]) + struct.pack("<H", i)
            last = live.pop()
            if i < len(live):
                live[i] = last
                index[last] = i
        n += 1
        if step_every and n % step_every == 0:
            out.append(OP_STEP_END)
        if limit_every and n % limit_every == 0:
            phase = (n // limit_every) % 3
            if phase == 0:
                out += bytes([OP_SET_LIMIT, LIMIT_HALF, 0, 0, 0])
            elif phase == 1:
                out.append(OP_TRIM)
            else:
                out += bytes([OP_SET_LIMIT, LIMIT_CAP, 0, 0, 0])
    return bytes(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(here, "..", "..", "..", "shared", "traces"))
    ap.add_argument("--out", default=os.path.join(here, "corpus"))
    args = ap.parse_args()
    if not os.path.isdir(args.traces):
        alt = "/work/shared/traces"
        if os.path.isdir(alt):
            args.traces = alt
        else:
            sys.exit("make_corpus: no trace directory (use --traces)")
    os.makedirs(args.out, exist_ok=True)
    # name: (trace, start, count, scale, config, step_every, limit_every)
    seeds = {
        "resnet50-start-sim": ("trace_resnet50.txt.gz", 0, 1500, 64, config_byte(0, 1, 0), 0, 0),
        "resnet50-steps-vmm-16m": ("trace_resnet50.txt.gz", 2000, 1500, 64,
                                   config_byte(1, 1, 1), 100, 0),
        "resnet50-limits-vmm": ("trace_resnet50.txt.gz", 3000, 1500, 32,
                                config_byte(1, 2, 3), 150, 250),
        "bert-start-vmm": ("trace_bert.txt.gz", 0, 1500, 128, config_byte(1, 1, 0), 0, 0),
        "bert-limits-sim": ("trace_bert.txt.gz", 6000, 1500, 128, config_byte(0, 1, 2, host=2),
                            100, 200),
        "bert-nofallback-sim": ("trace_bert.txt.gz", 9000, 1200, 64,
                                config_byte(0, 0, 1, fallback_off=True), 120, 300),
        "gpt2gen-start-sim": ("trace_gpt2gen.txt.gz", 0, 2000, 16, config_byte(0, 1, 0), 0, 0),
        "gpt2gen-decode-vmm": ("trace_gpt2gen.txt.gz", 100000, 2500, 4, config_byte(1, 1, 1, host=1),
                               200, 400),
    }
    cache = {}
    total = 0
    for name, (trace, start, count, scale, cfg, step_every, limit_every) in sorted(seeds.items()):
        if trace not in cache:
            cache[trace] = read_trace(os.path.join(args.traces, trace))
        data = encode(cache[trace], start, count, scale, cfg, step_every, limit_every)
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        total += len(data)
        print(f"{name}: {len(data)} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
