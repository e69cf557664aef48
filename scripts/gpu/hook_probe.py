#!/usr/bin/env python3
"""What the saved tensor offload's hooks cost the CPU, operation by
operation (docs/placement.md, "The CPU's share of a cut step").

    python3 scripts/gpu/hook_probe.py [N]   (through scripts/gpu/hook-probe.sh)

libvmem is PyTorch's allocator here, as in cut_bench.  Each operation the
hooks use is timed N times (default 2000) on an idle GPU, in microseconds per
call (median of five rounds): stream and event calls through torch.cuda and
through the lower-level calls PyTorch's own wrappers use, a copy of 1 MiB to
pinned host memory, libvmem's statistics read, and an allocation.
"""
import os
import statistics
import sys
import time
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import framework_proof as fp  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    L = fp.load_libvmem()
    L.install_torch(step_hook=False, offload=False)
    import torch
    import libvmem_offload
    read = libvmem_offload._stats_reader(L)
    dev = torch.device("cuda", 0)
    t = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
    host = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    s = torch.cuda.Stream(dev)
    c = torch.cuda.current_stream(dev)
    ev = torch.cuda.Event()
    ev.record(c)
    torch.cuda.synchronize()
    sid = s.stream_id, s.device_index, s.device_type
    cur = torch._C._cuda_getCurrentStream

    def ctx_copy():
        with torch.cuda.stream(s):
            host.copy_(t, non_blocking=True)

    def ctx_only():
        with torch.cuda.stream(s):
            pass

    def raw_copy():  # what torch.cuda.stream does, minus its device lookups
        prev = cur(0)
        torch._C._cuda_setStream(*sid)
        try:
            host.copy_(t, non_blocking=True)
        finally:
            torch._C._cuda_setStream(*prev)

    ops = [
        ("torch.cuda.current_stream(dev)", lambda: torch.cuda.current_stream(dev)),
        ("torch._C._cuda_getCurrentStream(0)", lambda: cur(0)),
        ("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing),
        ("with torch.cuda.stream(s): pass", ctx_only),
        ("torch.cuda.Event()", torch.cuda.Event),
        ("Event.record(stream)", lambda: ev.record(s)),
        ("Event.query()", ev.query),
        ("Stream.wait_event(ev)", lambda: s.wait_event(ev)),
        ("Stream.wait_stream(compute)", lambda: s.wait_stream(c)),
        ("copy 1 MiB to host, in torch.cuda.stream", ctx_copy),
        ("copy 1 MiB to host, raw setStream", raw_copy),
        ("host.view(dtype).view(shape)", lambda: host.view(torch.uint8).view(1 << 20)),
        ("t.untyped_storage().nbytes()", lambda: t.untyped_storage().nbytes()),
        ("t._version, t.shape, t.dtype key", lambda: (t.data_ptr(), t._version, tuple(t.shape), t.dtype)),
        ("weakref.finalize", lambda: weakref.finalize(ev, int)),
        ("libvmem stats read (ctypes)", lambda: read(0)),
        ("torch.empty_strided 1 MiB (libvmem)", lambda: torch.empty_strided((1 << 20,), (1,), dtype=torch.uint8, device=dev)),
        ("time.perf_counter()", time.perf_counter),
    ]
    print("hook_probe: %s, torch %s, %d calls per round, us per call (median of 5 rounds)" % (
        torch.cuda.get_device_name(0), torch.__version__, n))
    for name, fn in ops:
        rounds = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            rounds.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
        print("  %-44s %8.2f us" % (name, statistics.median(rounds)))


if __name__ == "__main__":
    main()
