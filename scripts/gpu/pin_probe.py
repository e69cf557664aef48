#!/usr/bin/env python3
"""What pinning host memory costs, the ways the saved tensor offload could do
it (docs/placement.md, "What a cut costs in its first steps").

    python3 scripts/gpu/pin_probe.py [MB per buffer] [count]

Times, for COUNT buffers of MB each (default 20 MB x 80, about what ViT-B/16
offloads per step at a 75% cut):
  - torch.empty(pin_memory=True) per buffer: PyTorch's caching host
    allocator, which rounds each block up to a power of two;
  - torch.empty + cudaHostRegister of exactly the buffer's bytes;
  - one slab of all the bytes, registered at once;
  - the slab registered on a second thread while the first runs GPU work
    (a loop of matmuls, timed alone first): how much the pinning slows the
    thread that queues kernels;
  - per buffer, an anonymous mapping advised huge (MADV_HUGEPAGE, 2 MiB
    aligned) and registered, with and without its pages touched first: what
    transparent huge pages change in the pinning (twenty-ninth session).
Each way runs in fresh memory; what it pinned is let go before the next.
"""
import mmap
import sys
import threading
import time

import torch


def ms(t0):
    return (time.perf_counter() - t0) * 1e3


def register(t):
    r = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
    if int(r) != 0:
        raise RuntimeError("cudaHostRegister: %s" % r)


def unregister(t):
    torch.cuda.cudart().cudaHostUnregister(t.data_ptr())


def register_each(n, count, total):
    """COUNT PyTorch CPU tensors of n bytes, each registered (timed), then
    unregistered (timed)."""
    t0 = time.perf_counter()
    bufs = [torch.empty(n, dtype=torch.uint8) for _ in range(count)]
    for b in bufs:
        register(b)
    t = ms(t0)
    print("cudaHostRegister per buffer:     %8.1f ms  (%.2f s per GB)" % (t, t / 1e3 / (total / 1e9)))
    ok = bufs[0].is_pinned()
    t0 = time.perf_counter()
    for b in bufs:
        unregister(b)
    print("  unregistering:                 %8.1f ms  (is_pinned %s)" % (ms(t0), ok))


def main():
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    n = int(mb * 1e6)
    total = n * count
    torch.zeros(1, device="cuda")
    print("%s, torch %s: %d buffers of %.1f MB (%.2f GB)" % (
        torch.cuda.get_device_name(0), torch.__version__, count, n / 1e6, total / 1e9))

    t0 = time.perf_counter()
    bufs = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(count)]
    t = ms(t0)
    print("torch pin_memory per buffer:     %8.1f ms  (%.2f s per GB asked)" % (t, t / 1e3 / (total / 1e9)))
    del bufs
    t0 = time.perf_counter()
    torch._C._host_emptyCache()
    print("  emptying PyTorch's host cache: %8.1f ms" % ms(t0))

    register_each(n, count, total)

    t0 = time.perf_counter()
    slab = torch.empty(total, dtype=torch.uint8)
    register(slab)
    t = ms(t0)
    print("one slab, registered:            %8.1f ms  (%.2f s per GB)" % (t, t / 1e3 / (total / 1e9)))
    t0 = time.perf_counter()
    unregister(slab)
    del slab
    print("  unregistering:                 %8.1f ms" % ms(t0))

    a = torch.randn(4096, 4096, device="cuda")

    def gpu_loop(k=400):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            a @ a
        torch.cuda.synchronize()
        return ms(t0)
    gpu_loop(50)
    alone = gpu_loop()
    done = {}

    def pin():
        t0 = time.perf_counter()
        s = torch.empty(total, dtype=torch.uint8)
        register(s)
        done["ms"] = ms(t0)
        done["slab"] = s
    th = threading.Thread(target=pin)
    th.start()
    both = gpu_loop()
    th.join()
    print("matmul loop alone %.1f ms; with the slab pinned on a second thread %.1f ms "
          "(the pinning took %.1f ms there)" % (alone, both, done["ms"]))
    unregister(done["slab"])


def huge(n, touch):
    """An anonymous mapping of n bytes (2 MiB aligned inside a larger one),
    advised huge, as a uint8 tensor; touch: its pages written first."""
    h = 2 << 20
    m = mmap.mmap(-1, n + h, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(m, dtype=torch.uint8)
    off = (-base.data_ptr()) % h
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE, off, n - n % h)
    t = base[off:off + n]
    if touch:
        t.view(-1)[::4096].fill_(1)
    return m, t


def huge_ways(n, count, total):
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            print("transparent huge pages: %s" % f.read().strip())
    except OSError:
        print("transparent huge pages: unknown")
    for touch in (False, True):
        t0 = time.perf_counter()
        keep = [huge(n, touch) for _ in range(count)]
        t1 = time.perf_counter()
        for _, b in keep:
            register(b)
        t = ms(t0)
        print("huge anonymous per buffer%s: %8.1f ms  (%.2f s per GB; of it the mappings and touching %.1f ms)" % (
            ", touched" if touch else "         ", t, t / 1e3 / (total / 1e9), (t1 - t0) * 1e3))
        for _, b in keep:
            unregister(b)
        del keep


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[3] == "huge":
        torch.zeros(1, device="cuda")
        mb = float(sys.argv[1])
        count = int(sys.argv[2])
        n = int(mb * 1e6)
        register_each(n, count, n * count)
        huge_ways(n, count, n * count)
        sys.exit(0)
    main()
