#!/usr/bin/env python3
"""Writes a synthetic training or inference trace (docs/benchmarks.md's format)
for studying the placement planner on steps it was not tuned on.

usage: synth_trace.py KIND SEED OUT.txt.gz [nosteps]

KIND:
  repeat  every step repeats the same allocation sequence (sizes drawn once)
  accum   the same with 2-4 micro-batches per step (gradient accumulation)
  vary    every step scales its activations by 0.5-1.5 (varying shapes)
  struct  every step drops a random third of its layers (same sizes)
  mixed   vary and struct together
  infer   requests of random size, no repeating structure
  persist repeat, with the gradients made in the backward pass (one per
          layer) and kept until the next step starts (zero_grad with
          set_to_none at the top of the loop): blocks live across step ends
  dbuf    repeat, with a buffer made at the start of each step whose
          previous copy is freed only after the new one, mid-forward
A step: per layer an activation saved for the backward pass, a temporary
freed at once, sometimes a second saved tensor; logits and their gradient;
the backward frees the saved tensors in reverse with a temporary each; the
optimizer state is allocated once after the first step, gradients every
step.  `s` lines mark the steps unless `nosteps` is given (then vmem-replay
finds them)."""
import gzip
import json
import random
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    kind, seed, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    marks = not (len(sys.argv) == 5 and sys.argv[4] == "nosteps")
    if kind not in ("repeat", "accum", "vary", "struct", "mixed", "infer", "persist", "dbuf"):
        sys.exit(__doc__)
    R = random.Random(seed)
    MiB = 1 << 20
    ev, live, clock, nid = [], {}, [0], [0]

    def alloc(size):
        i = nid[0]
        nid[0] += 1
        clock[0] += R.randint(1, 20)
        ev.append(f"a {i} {size} 0 {clock[0]}")
        live[i] = size
        return i

    def free(i):
        clock[0] += R.randint(1, 20)
        ev.append(f"f {i} {clock[0]}")
        del live[i]

    def rsz(lo, hi):
        return max(R.choice([R.randint(lo, hi), R.randint(lo, hi) // 512 * 512 + 512]), 1)

    layers = R.randint(4, 24)
    act = [rsz(1 * MiB, 64 * MiB) for _ in range(layers)]
    tmp = [rsz(4096, 32 * MiB) for _ in range(layers)]
    keep = [R.random() < 0.3 for _ in range(layers)]
    wsz = [rsz(256 * 1024, 16 * MiB) for _ in range(layers)]
    for s in wsz:
        alloc(s)
    opt = []
    iters = R.randint(5, 9)
    accum = R.randint(2, 4) if kind == "accum" else 1
    grads, buf = [], None
    bsz = rsz(8 * MiB, 128 * MiB) if kind == "dbuf" else 0  # no draw for the other kinds

    def micro_batch(sc, drop):
        saved = []
        for l in range(layers):
            if l in drop:
                continue
            x = alloc(max(512, int(act[l] * sc)))
            t = alloc(max(512, int(tmp[l] * sc)))
            if keep[l]:
                saved.append(alloc(max(512, int(tmp[l] * sc / 4))))
            free(t)
            saved.append(x)
        logits = alloc(max(512, int(sum(act) * sc / 4)))
        grad = alloc(max(512, int(sum(act) * sc / 4)))
        free(logits)
        for i, x in enumerate(reversed(saved)):
            g = alloc(max(512, live[x] // 2))
            if kind == "persist" and i < layers:
                grads.append(alloc(wsz[layers - 1 - i]))
            free(x)
            free(g)
        free(grad)

    for _ in range(iters):
        sc = R.choice([0.5, 0.75, 1.0, 1.25, 1.5]) if kind in ("vary", "mixed") else 1.0
        drop = set(R.sample(range(layers), R.randint(0, layers // 3))) \
            if kind in ("struct", "mixed") else set()
        if kind == "persist":
            while grads:
                free(grads.pop())
        if kind == "dbuf":
            old, buf = buf, alloc(bsz)
        if kind == "infer":
            for _ in range(R.randint(1, 4)):
                sc, xs = R.uniform(0.2, 1.5), []
                for l in range(layers):
                    xs.append(alloc(max(512, int(act[l] * sc))))
                    if len(xs) > 2:
                        free(xs.pop(0))
                for x in xs:
                    free(x)
        else:
            for m in range(accum):
                micro_batch(sc, drop)
                if kind == "dbuf" and m == 0 and old is not None:
                    free(old)
            if not opt:
                opt = [alloc(2 * s) for s in wsz]
            if kind != "persist":
                for g in [alloc(s) for s in wsz]:
                    free(g)
        if marks:
            ev.append(f"s {clock[0]}")
    hdr = {"workload": f"synth-{kind}-{seed}", "iters": iters, "streams": 1,
           "allocs": sum(1 for e in ev if e[0] == "a"),
           "frees": sum(1 for e in ev if e[0] == "f"), "source": "synth_trace.py"}
    with gzip.open(out, "wt") as fo:
        fo.write("# " + json.dumps(hdr) + "\n")
        for e in ev:
            fo.write(e + "\n")


main()
