#!/usr/bin/env python3
"""What letting pinned host memory go costs the steps that follow it
(docs/placement.md, "The steps after a raise").

    python3 scripts/gpu/release_probe.py [GB] [MB per buffer]

The saved tensor offload lets its host buffers go at the step end that ends
a cut (HostPool.clear: cudaHostUnregister, then the pageable memory freed).
The steps after a raise from 50% ran slow for a step or two with nothing
else to show for it.  This probe asks, without libvmem (PyTorch's own
allocator, a plain training step of many kernels), whether the release
alone does that, and which part of it:
  - unreg+free: buffers registered and written by copies, as the offload
    does, then unregistered and freed; the steps after it timed one by one;
  - unreg+free, sleep: the same, with a second slept (the device idle)
    before the steps: what decays with time rather than with steps;
  - unreg only: unregistered, the pageable memory kept; then freed;
  - free only (pageable): memory touched, never pinned, then freed;
  - nothing: the steps alone (the spread to read the others against).
Each way runs twice, in turn.  Per step: wall ms, the CPU's ms to queue it.
"""
import os
import resource
import statistics
import sys
import time

import torch

from pin_probe import ms, register, unregister  # scripts/gpu, this script's folder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import libvmem_offload  # noqa: E402  (the pool's own pageable memory, no libvmem needed)


def main():
    gb = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 32.0
    n = int(mb * 2**20)
    count = max(1, int(gb * 1e9 / n))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024)]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 1024, device=dev)
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    print("%s, torch %s: %d buffers of %.0f MiB (%.2f GB); a step of %d layers" % (
        torch.cuda.get_device_name(0), torch.__version__, count, n / 2**20, count * n / 1e9,
        len(layers)), flush=True)

    def step():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        cpu = ms(t0)
        torch.cuda.synchronize()
        return ms(t0), cpu

    def steps(k):
        return [step() for _ in range(k)]

    pool = libvmem_offload.HostPool(torch)

    def pageable(anon):
        """A buffer's pageable memory, the offload's two ways (n is whole
        pages): a PyTorch CPU tensor, or an anonymous mapping of its own."""
        pool.anon = anon
        return pool._pageable(n, n)[0]

    def pinned(anon=False):
        bufs = [pageable(anon) for _ in range(count)]
        for b in bufs:
            register(b)
        return bufs

    def written():
        """Pinned buffers written by copies out, as the offload's are."""
        bufs = pinned()
        for b in bufs:
            b.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        return bufs

    def unpin(bufs):
        for b in bufs:
            unregister(b)

    # pinning, the two ways the offload gets pageable memory: what
    # registering costs (wall, and the process's system time, all threads)
    def sys_ms():
        return resource.getrusage(resource.RUSAGE_SELF).ru_stime * 1e3

    for rep in range(2):
        for name, anon in (("torch.empty", False), ("anonymous mmap", True)):
            t0, s0 = time.perf_counter(), sys_ms()
            bufs = pinned(anon)
            print("pin %-15s %8.1f ms wall, %8.1f ms system" % (
                name, ms(t0), sys_ms() - s0), flush=True)
            t0, s0 = time.perf_counter(), sys_ms()
            unpin(bufs)
            del bufs
            print("  let go          %8.1f ms wall, %8.1f ms system" % (
                ms(t0), sys_ms() - s0), flush=True)

    steps(10)
    base = [s[0] for s in steps(20)]
    print("baseline: median %.1f ms, range %.1f-%.1f" % (
        statistics.median(base), min(base), max(base)), flush=True)

    def show(name, release_ms, after):
        print("%-22s release %7.1f ms; steps after: %s (cpu %s)" % (
            name, release_ms, " ".join("%.1f" % s[0] for s in after),
            " ".join("%.1f" % s[1] for s in after)), flush=True)

    for rep in range(2):
        for name, sleep in (("unreg+free", 0.0), ("unreg+free, sleep 1 s", 1.0)):
            bufs = written()
            steps(5)
            t0 = time.perf_counter()
            unpin(bufs)
            del bufs
            r = ms(t0)
            time.sleep(sleep)
            show(name, r, steps(8))

        bufs = written()
        steps(5)
        t0 = time.perf_counter()
        unpin(bufs)
        r = ms(t0)
        show("unreg only", r, steps(8))
        t0 = time.perf_counter()
        del bufs
        show("  then free", ms(t0), steps(8))

        bufs = [torch.ones(n, dtype=torch.uint8) for _ in range(count)]
        steps(5)
        t0 = time.perf_counter()
        del bufs
        show("free only (pageable)", ms(t0), steps(8))

        steps(5)
        show("nothing", 0.0, steps(8))


if __name__ == "__main__":
    main()
