#!/usr/bin/env python3
"""Can free physical memory be mapped at another address without waiting for
the device?  (docs/placement.md, "A remap that does not wait": under a limit,
an allocation that no free block fits makes libvmem give free memory back and
map new memory, which waits for all queued work.)

    python3 scripts/gpu/remap_probe.py

Checks, with the CUDA driver's virtual memory calls (CuPy runs the kernels):
  1. aliasing: handles mapped at a first range, retained from their addresses
     (cuMemRetainAllocationHandle) and mapped at a second: a kernel's write
     through one is read through the other;
  2. a mapping at a non-zero offset of a 64 MiB handle (the driver's
     documentation once said the offset must be zero);
  3. what the calls cost per handle size: 64 MiB as 32 granule handles and
     as one 64 MiB handle (created, mapped, aliased, access set, unmapped);
  4. whether the calls block while the device is busy: with about 0.5 s of
     matrix products queued, first on a non-blocking stream, then on the
     legacy default stream, each call's CPU time and whether the stream is
     still busy after it.  A call that waits for the device takes about the
     queued work's time and leaves the stream idle;
  5. the remap's calls per handle with 5 000 other handles mapped, then with
     copies running both ways as well, then with matrix products too (a cut
     step's conditions);
  6. what makes cuMemSetAccess wait: the same remap with copies one way only,
     copies in 4 MiB pieces, device-to-device copies, and copies made by a
     kernel through mapped pinned memory (no copy engine), whose bandwidth is
     measured at several grid sizes.
  7. a handle mapped again off its own alignment (64 and 512 MiB handles at
     an address 8 MiB past a multiple of their size, as a remap to an arena
     end off a boundary places them) against at an aligned one: the calls'
     cost, and a kernel's read and write bandwidth through each.
    python3 scripts/gpu/remap_probe.py 6    runs check 6 only (7: check 7).
Prints one line per check; "PROBE OK" last if nothing raised.
"""
import ctypes
import os
import sys
import time

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vmm_ctypes import Access, Loc, Prop, ck, cu, u64  # noqa: E402

G = 2 << 20  # a granule


DEV = 0
PROP = None
ACC = None


def reserve(size):
    va = u64()
    ck(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(0),
                              u64(0), u64(0)), "reserve")
    return va.value


def create(size):
    h = u64()
    ck(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(PROP), u64(0)),
       "create")
    return h


def map_at(va, size, h, off=0):
    return cu.cuMemMap(u64(va), ctypes.c_size_t(size), ctypes.c_size_t(off), h, u64(0))


def access(va, size):
    ck(cu.cuMemSetAccess(u64(va), ctypes.c_size_t(size), ctypes.byref(ACC), ctypes.c_size_t(1)),
       "access")


def retain(va):
    h = u64()
    ck(cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(va)), "retain")
    return h


def view(va, nbytes):
    mem = cp.cuda.UnownedMemory(va, nbytes, None)
    return cp.ndarray((nbytes // 4,), dtype=cp.int32, memptr=cp.cuda.MemoryPointer(mem, 0))


def check_alias():
    n = 8
    a, b = reserve(n * G), reserve(n * G)
    map_each(a, [create(G) for _ in range(n)], G)
    access(a, n * G)
    x = view(a, n * G)
    x[:] = cp.arange(x.size, dtype=cp.int32)
    t_alias = seconds(lambda: (alias_each(a, b, n, G), access(b, n * G)))
    y = view(b, n * G)
    same = bool((y == cp.arange(y.size, dtype=cp.int32)).all())
    y[::3] = -1
    back = bool((x[::3] == -1).all())
    cp.cuda.Device().synchronize()
    ck(cu.cuMemUnmap(u64(a), ctypes.c_size_t(n * G)), "unmap a")
    still = bool((y[1::3] == cp.arange(y.size, dtype=cp.int32)[1::3]).all())
    print("alias: read through the second range %s, write seen through the first %s, "
          "data kept after the first range is unmapped %s; %d handles mapped again in %.1f us"
          % (same, back, still, n, t_alias * 1e6))
    ck(cu.cuMemUnmap(u64(b), ctypes.c_size_t(n * G)), "unmap b")
    if not (same and back and still):
        raise RuntimeError("aliasing does not hold")


def check_offset():
    big = 64 << 20
    h = create(big)
    va = reserve(G)
    r = map_at(va, G, h, off=G)
    print("map at offset 2 MiB of a 64 MiB handle: CUresult %d" % r)
    if r == 0:
        access(va, G)
        ck(cu.cuMemUnmap(u64(va), ctypes.c_size_t(G)), "unmap")
    ck(cu.cuMemRelease(h), "release")


def map_each(base, handles, hsize):
    """Maps the handles one after the other from base and drops their
    references (the mappings keep the memory, as libvmem does)."""
    for i, h in enumerate(handles):
        ck(map_at(base + i * hsize, hsize, h), "map")
        ck(cu.cuMemRelease(h), "release")


def alias_each(src, dst, n, hsize):
    """Maps the n handles mapped from src again from dst (retained from
    their addresses): libvmem's remap."""
    for i in range(n):
        h = retain(src + i * hsize)
        ck(map_at(dst + i * hsize, hsize, h), "map alias")
        ck(cu.cuMemRelease(h), "release")


def seconds(fn):
    """The CPU's time in fn()."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def unmap_each(base, n, hsize):
    """Unmaps n mappings of hsize bytes from base, one call each."""
    for i in range(n):
        ck(cu.cuMemUnmap(u64(base + i * hsize), ctypes.c_size_t(hsize)), "unmap")


def check_access_cost():
    """cuMemSetAccess and cuMemMap over 64 MiB mapped as 32 granule handles,
    as one 64 MiB handle, and aliases of each (the remap's calls), on an idle
    device: is the cost per handle or per byte?"""
    total = 64 << 20
    for hsize in (G, total):
        n = total // hsize
        src, dst = reserve(total), reserve(total)
        hs = [create(hsize) for _ in range(n)]
        t_map = seconds(lambda: map_each(src, hs, hsize))
        t_acc = seconds(lambda: access(src, total))
        t_alias = seconds(lambda: alias_each(src, dst, n, hsize))
        t_acc2 = seconds(lambda: access(dst, total))
        t_unmap = seconds(lambda: unmap_each(src, n, hsize))
        unmap_each(dst, n, hsize)
        print("64 MiB as %d handle(s) of %d MiB: create+map %.0f us, access %.0f us; alias "
              "(retain+map) %.0f us, access %.0f us; unmap %.0f us"
              % (n, hsize >> 20, t_map * 1e6, t_acc * 1e6, t_alias * 1e6, t_acc2 * 1e6,
                 t_unmap * 1e6))


def busy_work(stream, ms_target=500):
    m = cp.ones((8192, 8192), dtype=cp.float32)
    with stream:
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        m @ m
        e1.record()
    e1.synchronize()
    one = cp.cuda.get_elapsed_time(e0, e1)
    reps = max(1, int(ms_target / max(one, 0.1)))
    return m, reps, one


def check_blocking(name, stream):
    n = 16
    m, reps, one = busy_work(stream)
    src = reserve(n * G)
    map_each(src, [create(G) for _ in range(n)], G)
    access(src, n * G)
    dst = reserve(n * G)
    fresh = reserve(n * G)
    cp.cuda.Device().synchronize()
    rows = []

    def timed(what, fn):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        rows.append("%s %.0f us (stream busy after: %s)" % (what, dt * 1e6, not stream.done))

    with stream:
        for _ in range(reps):
            m @ m
    stream_busy = not stream.done

    timed("cuMemCreate+cuMemMap x%d" % n, lambda: map_each(fresh, [create(G) for _ in range(n)], G))
    timed("cuMemSetAccess (fresh)", lambda: access(fresh, n * G))
    timed("retain+cuMemMap x%d (alias)" % n, lambda: alias_each(src, dst, n, G))
    timed("cuMemSetAccess (alias)", lambda: access(dst, n * G))
    timed("cuMemUnmap (the aliased source)",
          lambda: ck(cu.cuMemUnmap(u64(src), ctypes.c_size_t(n * G)), "unmap src"))
    timed("cuMemUnmap (fresh)",
          lambda: ck(cu.cuMemUnmap(u64(fresh), ctypes.c_size_t(n * G)), "unmap fresh"))
    t0 = time.perf_counter()
    stream.synchronize()
    left = time.perf_counter() - t0
    print("%s: %d products of %.1f ms queued (busy at start: %s); after the calls the CPU "
          "still waited %.0f ms for the stream" % (name, reps, one, stream_busy, left * 1e3))
    for r in rows:
        print("    " + r)
    ck(cu.cuMemUnmap(u64(dst), ctypes.c_size_t(n * G)), "unmap dst")
    del m


def remap_once(n=16, hsize=G):
    """libvmem's remap of n handles of hsize bytes (retain + map at a second
    range, access), then the unmapping of the old range: the CPU's seconds of
    each."""
    src = reserve(n * hsize)
    map_each(src, [create(hsize) for _ in range(n)], hsize)
    access(src, n * hsize)
    dst = reserve(n * hsize)
    t_alias = seconds(lambda: alias_each(src, dst, n, hsize))
    t_acc = seconds(lambda: access(dst, n * hsize))
    t_unmap = seconds(lambda: ck(cu.cuMemUnmap(u64(src), ctypes.c_size_t(n * hsize)), "unmap"))
    ck(cu.cuMemUnmap(u64(dst), ctypes.c_size_t(n * hsize)), "unmap dst")
    return t_alias, t_acc, t_unmap


def best_per_handle(n, hsize=G):
    """remap_once of n handles of hsize bytes, best of 3, per handle in us:
    (retain + map, access, unmap)."""
    rows = [remap_once(n, hsize) for _ in range(3)]
    return tuple(min(r[k] for r in rows) / n * 1e6 for k in range(3))


def gb_per_s(stream, nbytes, queue):
    """GB/s of the nbytes that queue() puts on stream, timed by events there."""
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    ev0.record(stream)
    queue()
    ev1.record(stream)
    ev1.synchronize()
    return nbytes / cp.cuda.get_elapsed_time(ev0, ev1) / 1e6


def check_under_load(mappings=5000, copies=12):
    """5. the remap's calls per granule handle as in a cut step (docs/placement.md, "The
    CPU's time in the driver's mapping calls"): on an idle device, then with `mappings`
    other granule handles mapped (a 10 GB arena), then also with copies running both ways
    on two streams (1 GiB each, `copies` each way)."""
    n = 16

    def show(what):
        a, c, u = best_per_handle(n)
        ba, bc, bu = best_per_handle(1, 32 * G)
        print("remap, %s: per 2 MiB handle (%d of them) retain+map %.1f us, access %.1f us, "
              "unmap %.1f us; one 64 MiB handle: %.1f, %.1f, %.1f us (best of 3)"
              % (what, n, a, c, u, ba, bc, bu))
    show("idle device")
    big = reserve(mappings * G)
    map_each(big, [create(G) for _ in range(mappings)], G)
    access(big, mappings * G)
    show("%d other handles mapped" % mappings)
    h = cp.cuda.alloc_pinned_memory(1 << 30)
    d = cp.empty(1 << 30, dtype=cp.uint8)
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    for _ in range(copies):
        cp.cuda.runtime.memcpyAsync(h.ptr, d.data.ptr, 1 << 30, 2, s1.ptr)  # device to host
        cp.cuda.runtime.memcpyAsync(d.data.ptr, h.ptr, 1 << 30, 1, s2.ptr)  # host to device
    show("%d other handles mapped, copies running both ways (busy after: %s)"
         % (mappings, not s1.done))
    s1.synchronize()
    s2.synchronize()
    s3 = cp.cuda.Stream(non_blocking=True)
    m, reps, _ = busy_work(s3)
    with s3:
        for _ in range(reps):
            m @ m
    for _ in range(copies):
        cp.cuda.runtime.memcpyAsync(h.ptr, d.data.ptr, 1 << 30, 2, s1.ptr)
        cp.cuda.runtime.memcpyAsync(d.data.ptr, h.ptr, 1 << 30, 1, s2.ptr)
    show("%d other handles mapped, copies both ways and matrix products running (busy after: "
         "%s)" % (mappings, not s3.done))
    for st in (s1, s2, s3):
        st.synchronize()
    ck(cu.cuMemUnmap(u64(big), ctypes.c_size_t(mappings * G)), "unmap big")


COPY_SRC = r"""
extern "C" __global__ void copy16(const ulonglong2 *__restrict__ src,
                                  ulonglong2 *__restrict__ dst, unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def check_what_waits(copies=12):
    """6. which traffic makes cuMemSetAccess take about 1 ms per handle (check 5)."""
    n = 16
    GiB = 1 << 30
    kern = cp.RawKernel(COPY_SRC, "copy16")
    hptr = cp.cuda.runtime.hostAlloc(GiB, 2)  # cudaHostAllocMapped
    d = cp.empty(GiB, dtype=cp.uint8)
    d2 = cp.empty(GiB, dtype=cp.uint8)
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)

    def kcopy(src, dst, nbytes, stream, grid):
        kern((grid,), (256,), (src, dst, cp.uint64(nbytes // 16)), stream=stream)

    def show(what, queue):
        cp.cuda.Device().synchronize()
        queue()
        a, c, u = best_per_handle(n)
        busy = not (s1.done and s2.done)
        cp.cuda.Device().synchronize()
        print("what waits, %s: per 2 MiB handle retain+map %.1f us, access %.1f us, unmap "
              "%.1f us (busy after: %s)" % (what, a, c, u, busy))

    def ce(kinds, piece=GiB):
        def q():
            for _ in range(copies):
                for off in range(0, GiB, piece):
                    if "d2h" in kinds:
                        cp.cuda.runtime.memcpyAsync(hptr + off, d.data.ptr + off, piece, 2, s1.ptr)
                    if "h2d" in kinds:
                        cp.cuda.runtime.memcpyAsync(d.data.ptr + off, hptr + off, piece, 1, s2.ptr)
                    if "d2d" in kinds:
                        cp.cuda.runtime.memcpyAsync(d2.data.ptr + off, d.data.ptr + off, piece, 3,
                                                    s1.ptr)
        return q

    def sm(grid, ways=("d2h", "h2d")):
        def q():
            for _ in range(copies):
                if "d2h" in ways:
                    kcopy(d.data.ptr, hptr, GiB, s1, grid)
                if "h2d" in ways:
                    kcopy(hptr, d.data.ptr, GiB, s2, grid)
        return q

    show("idle", lambda: None)
    show("copy engines, device to host only", ce(("d2h",)))
    show("copy engines, host to device only", ce(("h2d",)))
    show("copy engines, both ways in 4 MiB pieces", ce(("d2h", "h2d"), 4 << 20))
    show("copy engines, device to device", ce(("d2d",)))
    for grid in (16, 32, 132):
        for way, src, dst in (("d2h", d.data.ptr, hptr), ("h2d", hptr, d.data.ptr)):
            bw = gb_per_s(s1, 4 * GiB, lambda: [kcopy(src, dst, GiB, s1, grid) for _ in range(4)])
            print("what waits, a kernel's copy %s through mapped memory, %d blocks of 256: "
                  "%.1f GB/s" % (way, grid, bw))
    bw = gb_per_s(s1, 4 * GiB, lambda: [cp.cuda.runtime.memcpyAsync(hptr, d.data.ptr, GiB, 2,
                                                                      s1.ptr) for _ in range(4)])
    print("what waits, the copy engine device to host: %.1f GB/s" % bw)
    # a copy to host asked as device to device: which engine, and does it slow the mappings?
    def d2d_to_host():
        for _ in range(copies):
            cp.cuda.runtime.memcpyAsync(hptr, d.data.ptr, GiB, 3, s1.ptr)

    def dtod_driver():
        for _ in range(copies):
            ck(cu.cuMemcpyDtoDAsync_v2(u64(hptr), u64(d.data.ptr), ctypes.c_size_t(GiB),
                                       ctypes.c_void_p(s1.ptr)), "dtod")
    for name, fn in (("cudaMemcpyDeviceToDevice", d2d_to_host), ("cuMemcpyDtoDAsync", dtod_driver)):
        try:
            print("what waits, a copy to host memory asked as %s: %.1f GB/s"
                  % (name, gb_per_s(s1, copies * GiB, fn)))
            show("copies to host asked as %s" % name, fn)
        except Exception as e:  # noqa: BLE001 (a probe: say what the driver said)
            print("what waits, a copy to host memory asked as %s: refused (%s)" % (name, e))
    show("a kernel's copies both ways, 32 blocks each", sm(32))
    show("a kernel's copies both ways, 132 blocks each", sm(132))
    show("a kernel's copy device to host (32 blocks) and the copy engine host to device",
         lambda: (sm(32, ("d2h",))(), ce(("h2d",))()))
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.freeHost(hptr)


def check_alignment(rounds=5):
    """7. a handle aliased at an address off its alignment: the calls' cost
    and kernels' bandwidth through it, against an aligned alias."""
    for hsize in (64 << 20, 512 << 20):
        span = 4 * hsize
        src, dst = reserve(span), reserve(span)
        # src and dst are aligned to hsize (reserve(…, 0) aligns large spans to
        # at least 2 MiB only: align by hand)
        src_a = (src + hsize - 1) // hsize * hsize
        dst_a = (dst + hsize - 1) // hsize * hsize
        h = create(hsize)
        ck(map_at(src_a, hsize, h), "map")
        ck(cu.cuMemRelease(h), "release")
        access(src_a, hsize)
        x = view(src_a, hsize)
        x[:] = 7
        cp.cuda.Device().synchronize()
        out = cp.empty_like(x)
        for where, at in (("aligned", dst_a), ("8 MiB off", dst_a + (8 << 20))):
            t_map, t_acc, t_unmap, bw = [], [], [], []
            for _ in range(rounds):
                t_map.append(seconds(lambda: alias_each(src_a, at, 1, hsize)))
                t_acc.append(seconds(lambda: access(at, hsize)))
                y = view(at, hsize)
                cp.copyto(out, y)  # warm

                def copies():  # 20 copies of the handle through the alias: each reads and writes it
                    for _ in range(10):
                        cp.copyto(out, y)
                        cp.copyto(y, out)
                bw.append(gb_per_s(cp.cuda.get_current_stream(), 2 * 2 * 10 * hsize, copies))
                cp.cuda.Device().synchronize()
                t_unmap.append(seconds(
                    lambda: ck(cu.cuMemUnmap(u64(at), ctypes.c_size_t(hsize)), "unmap alias")))
            ok = bool((x == 7).all())
            print("alignment: %d MiB handle aliased %s: retain+map %.0f us, access %.0f us, "
                  "unmap %.0f us (medians of %d); copies through it %.0f GB/s (min %.0f, max "
                  "%.0f), data %s" % (hsize >> 20, where, sorted(t_map)[rounds // 2] * 1e6,
                                      sorted(t_acc)[rounds // 2] * 1e6,
                                      sorted(t_unmap)[rounds // 2] * 1e6, rounds,
                                      sorted(bw)[rounds // 2], min(bw), max(bw),
                                      "kept" if ok else "LOST"))
            if not ok:
                raise RuntimeError("data lost through an unaligned alias")
        del x, out
        ck(cu.cuMemUnmap(u64(src_a), ctypes.c_size_t(hsize)), "unmap")
        ck(cu.cuMemAddressFree(u64(src), ctypes.c_size_t(span)), "free va")
        ck(cu.cuMemAddressFree(u64(dst), ctypes.c_size_t(span)), "free va")


def main():
    global PROP, ACC, DEV
    cp.zeros(1)
    DEV = cp.cuda.Device().id
    PROP = Prop(type=1, location=Loc(type=1, id=DEV))
    ACC = Access(location=Loc(type=1, id=DEV), flags=3)
    print("device: %s" % cp.cuda.runtime.getDeviceProperties(DEV)["name"].decode())
    if sys.argv[1:] == ["6"]:
        check_what_waits()
        print("PROBE OK")
        return
    if sys.argv[1:] == ["7"]:
        check_alignment()
        print("PROBE OK")
        return
    check_alias()
    check_offset()
    check_access_cost()
    check_access_cost()
    check_blocking("non-blocking stream", cp.cuda.Stream(non_blocking=True))
    check_blocking("blocking stream", cp.cuda.Stream(non_blocking=False))
    check_blocking("legacy default stream", cp.cuda.Stream.null)
    check_under_load()
    check_what_waits()
    check_alignment()
    print("PROBE OK")


if __name__ == "__main__":
    main()
