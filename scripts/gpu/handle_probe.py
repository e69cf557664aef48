#!/usr/bin/env python3
"""Does the size of the physical handles behind a virtual range change how
fast kernels read it?  (docs/placement.md, "After the raise": a job whose
memory came back from host in many small handles ran slower.)

    python3 scripts/gpu/handle_probe.py [GiB]

Maps one range of GiB (default 4) with the CUDA driver's virtual memory calls
in handles of 1 GiB, 64 MiB and 2 MiB, and 2 MiB handles whose physical
pages are scattered (twice as many created, every other one released before
mapping), then times on each: a streaming copy from one half to the other,
and a random gather of 32 Mi float32 values over the whole range (which
needs a translation per access, the TLB's worst case).  CuPy runs the
kernels; the range is wrapped as CuPy memory it does not own.  Prints one
line per layout, GB/s for the copy and ns per gathered value.
"""
import ctypes
import os
import sys

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vmm_ctypes import Access, Loc, Prop, ck, cu, u64  # noqa: E402


def mapped(total, hsize, scatter):
    dev = cp.cuda.Device().id
    prop = Prop(type=1, location=Loc(type=1, id=dev))  # pinned, on the device
    va = u64()
    ck(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(total), ctypes.c_size_t(0),
                              u64(0), u64(0)), "reserve")
    n = total // hsize
    handles, spare = [], []
    for i in range(n * (2 if scatter else 1)):
        h = u64()
        ck(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(hsize), ctypes.byref(prop), u64(0)),
           "create")
        (spare if scatter and i % 2 else handles).append(h)
    for h in spare:  # every other physical piece goes back: the kept ones are scattered
        ck(cu.cuMemRelease(h), "release")
    for i, h in enumerate(handles):
        ck(cu.cuMemMap(u64(va.value + i * hsize), ctypes.c_size_t(hsize), ctypes.c_size_t(0), h,
                       u64(0)), "map")
    acc = Access(location=Loc(type=1, id=dev), flags=3)
    ck(cu.cuMemSetAccess(u64(va.value), ctypes.c_size_t(total), ctypes.byref(acc),
                         ctypes.c_size_t(1)), "access")
    return va.value, handles


def unmap(va, total, handles):
    ck(cu.cuMemUnmap(u64(va), ctypes.c_size_t(total)), "unmap")
    for h in handles:
        ck(cu.cuMemRelease(h), "release")
    ck(cu.cuMemAddressFree(u64(va), ctypes.c_size_t(total)), "free")


def timed(fn, reps):
    fn()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / 1e3 / reps


def main():
    total = int(float(sys.argv[1]) * (1 << 30)) if len(sys.argv) > 1 else 4 << 30
    cp.zeros(1)  # the primary context, current
    n = total // 4
    idx = cp.random.randint(0, n, size=32 << 20, dtype=cp.int64)
    print("device: %s; range %.1f GiB" % (cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                          total / (1 << 30)))
    for name, hsize, scatter in (("1 GiB handles", 1 << 30, False), ("64 MiB handles", 64 << 20,
                                 False), ("2 MiB handles", 2 << 20, False),
                                 ("2 MiB handles, scattered", 2 << 20, True),
                                 ("1 GiB handles, again", 1 << 30, False)):
        if hsize > total:
            continue
        va, hs = mapped(total, hsize, scatter)
        mem = cp.cuda.UnownedMemory(va, total, None)
        x = cp.ndarray((n,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))
        x[:] = 1.0
        half = n // 2
        t_copy = timed(lambda: cp.copyto(x[half:], x[:half]), 10)
        t_gather = timed(lambda: x[idx], 10)
        print("%-26s copy %7.1f GB/s   random gather %6.3f ns per value" % (
            name, 2 * half * 4 / t_copy / 1e9, t_gather / idx.size * 1e9), flush=True)
        del x, mem
        cp.cuda.Device().synchronize()
        unmap(va, total, hs)


if __name__ == "__main__":
    main()
