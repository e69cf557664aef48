# Copy bandwidth to/from host buffers of the offload's kinds (throw-away probe, call 3)
import ctypes, time, torch, mmap, os
torch.cuda.init()
rt = torch.cuda.cudart()
PAGE = 4096
libc = ctypes.CDLL("libc.so.6")
def registered(n, huge=False):
    length = (n + PAGE - 1) // PAGE * PAGE
    if huge:
        H = 2 << 20
        length2 = (n + H - 1) // H * H
        whole = torch.empty(length2 + H, dtype=torch.uint8)
        off = (-whole.data_ptr()) % H
        buf = whole[off:off + n]
        libc.madvise(ctypes.c_void_p(buf.data_ptr()), ctypes.c_size_t(length2), 14)  # MADV_HUGEPAGE
        buf.fill_(1)
        length = length2
    else:
        whole = torch.empty(length + PAGE, dtype=torch.uint8)
        off = (-whole.data_ptr()) % PAGE
        buf = whole[off:off + n]
    err = rt.cudaHostRegister(buf.data_ptr(), length, 0)
    assert int(err) == 0, err
    return buf
def pinned(n):
    return torch.empty(n, dtype=torch.uint8, pin_memory=True)
s = torch.cuda.Stream()
def bw(kind, n, direction, load=False, reps=10):
    host = {"pinned": pinned, "registered": registered, "registered-thp": lambda n: registered(n, True)}[kind](n)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    def one():
        with torch.cuda.stream(s):
            if direction == "d2h":
                host.copy_(dev, non_blocking=True)
            else:
                dev.copy_(host, non_blocking=True)
    one(); torch.cuda.synchronize()
    if load:
        for _ in range(200):
            a @ a
    t0 = torch.cuda.Event(enable_timing=True); t1 = torch.cuda.Event(enable_timing=True)
    t0.record(s)
    for _ in range(reps):
        one()
    t1.record(s)
    torch.cuda.synchronize()
    ms = t0.elapsed_time(t1)
    if kind != "pinned":
        rt.cudaHostUnregister(host.data_ptr())
    return n * reps / ms / 1e6
print("thp:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip())
for n in (8 << 20, 50 << 20, 205 << 20):
    for kind in ("pinned", "registered", "registered-thp"):
        r = [bw(kind, n, d, load) for d in ("d2h", "h2d") for load in (False, True)]
        print("%4d MiB %-15s d2h %.1f (under matmuls %.1f)  h2d %.1f (under matmuls %.1f) GB/s" % (n >> 20, kind, *r))
