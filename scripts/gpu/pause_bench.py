"""Issue 12's GPU checks, one part per process (PART=bench|discard|graph|
colocate|capture|tms); run by scripts/gpu/pause-bench.sh.  Lines starting RESULT are
the figures, FAIL a broken expectation (exit status 1)."""

import os
import subprocess
import sys
import time

import torch

PART = os.environ.get("PART", "bench")
GiB = 1 << 30
MULT = 6364136223846793005  # odd: the pattern is a bijection of the index
failed = False


def fail(msg):
    global failed
    failed = True
    print("FAIL", msg, flush=True)


def result(msg):
    print("RESULT", msg, flush=True)


def other_process_free():
    """cudaMemGetInfo's free bytes as a second process sees them."""
    code = "import torch; print(torch.cuda.mem_get_info()[0])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("VMEM_")})
    return int(r.stdout.strip().split()[-1])


def fill(x):
    v = x.view(torch.int64)
    step = 1 << 27
    for i in range(0, v.numel(), step):
        j = min(i + step, v.numel())
        torch.arange(i, j, device=x.device, out=v[i:j])
        v[i:j].mul_(MULT)


def verify(x):
    v = x.view(torch.int64)
    step = 1 << 27
    for i in range(0, v.numel(), step):
        j = min(i + step, v.numel())
        e = torch.arange(i, j, device=x.device, dtype=torch.int64).mul_(MULT)
        if not torch.equal(v[i:j], e):
            return False
    return True


def gbps(n, s):
    return n / s / 1e9 if s > 0 else float("inf")


def big_tag():
    """libvmem as PyTorch's allocator and a PAUSE_GIB tensor in tag "big",
    filled: (libvmem, bytes, tensor)."""
    import libvmem as L
    L.install_torch()
    n = int(os.environ.get("PAUSE_GIB", "20")) * GiB
    with L.region("big"):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
    fill(x)
    torch.cuda.synchronize()
    return L, n, x


def part_cold():
    """One cold keep pause (nothing kept: the moves create, i.e. pin, the
    host memory) and its resume, in a fresh process (part bench's #1 runs
    after the fill of a 20 GiB tensor in a process that pinned nothing yet
    either; this part repeats it alone, to see how much pinning varies)."""
    L, n, x = big_tag()
    L.reserve_host(0)
    t = time.perf_counter()
    L.pause("big", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    t = time.perf_counter()
    L.resume("big")
    tr = time.perf_counter() - t
    result("cold pause-keep %d GiB (fresh process): %.3f s, %.1f GB/s; resume %.3f s, %.1f GB/s"
           % (n >> 30, tp, gbps(n, tp), tr, gbps(n, tr)))
    if not verify(x):
        fail("contents changed across the cold pause/resume")


def part_bench():
    L, n, x = big_tag()
    free0 = other_process_free()
    L.reserve_host(0)  # nothing kept: the first pause creates (pins) its host memory
    t = time.perf_counter()
    L.pause("big", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    free1 = other_process_free()
    ts, s = L.tag_stats("big"), L.stats()
    result("pause-keep #1 %d GiB (cold: host memory created during the pause): %.3f s, %.1f GB/s "
           "(target >= 45)" % (n >> 30, tp, gbps(n, tp)))
    result("after pause: tag device_held %d, host_held %d; instance deviceHeld %d "
           "(tag 0 and other tags: %s)" % (ts["device_held"], ts["host_held"], s["deviceHeld"],
                                          [(t["tag"], t["deviceHeld"]) for t in s["tags"]]))
    result("second process sees %.2f GiB more free after pause (tag was %.2f GiB)"
           % ((free1 - free0) / GiB, n / GiB))
    if ts["device_held"] != 0:
        fail("tag holds device memory after pause")
    if free1 - free0 < n * 0.98:
        fail("device memory not visible as free to another process")
    t = time.perf_counter()
    L.resume("big")
    tr = time.perf_counter() - t
    result("resume-keep #1 %d GiB: %.3f s, %.1f GB/s (target >= 45)" % (n >> 30, tr, gbps(n, tr)))
    if not verify(x):
        fail("contents changed across pause/resume #1")
    else:
        result("contents bitwise equal after resume #1")
    # Second pause: the host memory of the first came back to the reserve.
    fill(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    L.pause("big", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    result("pause-keep #2 %d GiB (host memory kept from #1): %.3f s, %.1f GB/s (target >= 45)"
           % (n >> 30, tp, gbps(n, tp)))
    t = time.perf_counter()
    L.resume("big")
    tr = time.perf_counter() - t
    result("resume-keep #2 %d GiB: %.3f s, %.1f GB/s (target >= 45)" % (n >> 30, tr, gbps(n, tr)))
    if not verify(x):
        fail("contents changed across pause/resume #2")
    # Reserve ahead: drop what is kept, time the reservation, then pause.
    L.reserve_host(0)
    t = time.perf_counter()
    kept = L.reserve_host(n)
    tres = time.perf_counter() - t
    result("reserve_host %d GiB (VMEM_VMM_RESERVE_THREADS=%s): %.3f s, %.1f GB/s; kept %.2f GiB"
           % (n >> 30, os.environ.get("VMEM_VMM_RESERVE_THREADS", "4"), tres, gbps(n, tres),
              kept / GiB))
    t = time.perf_counter()
    L.pause("big", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    result("pause-keep #3 %d GiB (after reserve_host): %.3f s, %.1f GB/s (target >= 45)"
           % (n >> 30, tp, gbps(n, tp)))
    t = time.perf_counter()
    L.resume("big")
    tr = time.perf_counter() - t
    result("resume-keep #3 %d GiB: %.3f s, %.1f GB/s" % (n >> 30, tr, gbps(n, tr)))
    if not verify(x):
        fail("contents changed across pause/resume #3")
    # Variants of the warm pause (the backend reads these at each move; the
    # "vmm phases" lines on stderr give each move's breakdown).  #1-#3 and
    # #7 go through the mirror (the default); #6 is the swap path that was
    # the default before it (old device memory mapped at staging, host
    # memory at its address), #4 the staged path, #5 swap with the old
    # device memory freed after the last copy.  #7 repeats #2's path last,
    # so the mirror is timed before and after the others in one run.
    old = {"VMEM_VMM_MOVE_MIRROR": "0"}
    for label, env in (("#6 old swap path (VMEM_VMM_MOVE_MIRROR=0)", old),
                       ("#4 staged path (VMEM_VMM_MOVE_MIRROR=0 VMEM_VMM_MOVE_SWAP=0)",
                        dict(old, VMEM_VMM_MOVE_SWAP="0")),
                       ("#5 swap, device memory freed late (VMEM_VMM_MOVE_MIRROR=0 "
                        "VMEM_VMM_FREE_LATE=1)", dict(old, VMEM_VMM_FREE_LATE="1")),
                       ("#7 mirror again (default path)", {})):
        os.environ.update(env)
        fill(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        L.pause("big", keep=True, empty_cache=False)
        tp = time.perf_counter() - t
        for var in env:
            del os.environ[var]
        result("pause-keep %s %d GiB: %.3f s, %.1f GB/s (target >= 45)"
               % (label, n >> 30, tp, gbps(n, tp)))
        L.resume("big")
        if not verify(x):
            fail("contents changed across pause/resume %s" % label)
        else:
            result("contents bitwise equal after resume %s" % label)
    L.reserve_host(0)  # the baseline below pins its own
    discard(L, n)
    t = time.perf_counter()
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    result("pinning %d GiB for the baseline took %.2f s" % (n >> 30, time.perf_counter() - t))
    fill(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    h.copy_(x, non_blocking=True)
    torch.cuda.synchronize()
    d2h = time.perf_counter() - t
    t = time.perf_counter()
    x.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
    h2d = time.perf_counter() - t
    result("pinned copy baseline: D2H %.3f s %.1f GB/s, H2D %.3f s %.1f GB/s"
           % (d2h, gbps(n, d2h), h2d, gbps(n, h2d)))


def handles():
    """The handle sizes this process runs with (VMEM_VMM_BIG_MIB, VMEM_VMM_HUGE_MIB)."""
    huge = os.environ.get("VMEM_VMM_HUGE_MIB", "512")
    return "%s MiB handles, huge %s" % (os.environ.get("VMEM_VMM_BIG_MIB", "64"),
                                        "off" if huge == "0" else huge + " MiB")


def discard(L, n):
    """Pause with discard of the tag "big" (n bytes) and resume, timed."""
    torch.cuda.synchronize()
    free0 = other_process_free()
    t = time.perf_counter()
    L.pause("big", keep=False, empty_cache=False)
    td = time.perf_counter() - t
    free1 = other_process_free()
    big = handles()
    result("pause-discard %d GiB (%s): %.1f ms; second process sees %.2f GiB more free"
           % (n >> 30, big, td * 1e3, (free1 - free0) / GiB))
    if free1 - free0 < n * 0.98:
        fail("device memory not visible as free to another process after discard")
    t = time.perf_counter()
    L.resume("big")
    result("resume-discard %d GiB (%s): %.1f ms"
           % (n >> 30, big, (time.perf_counter() - t) * 1e3))


def part_discard():
    """Pause with discard (twice), then a warm keep pause, with the big
    handle size of VMEM_VMM_BIG_MIB (fewer, larger mappings to take down)."""
    import libvmem as L
    L.install_torch()
    n = int(os.environ.get("PAUSE_GIB", "20")) * GiB
    big = handles()
    with L.region("big"):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
    fill(x)
    for _ in range(int(os.environ.get("DISCARD_ROUNDS", "2"))):
        discard(L, n)
    if os.environ.get("DISCARD_KEEP", "1") == "0":
        return
    fill(x)
    torch.cuda.synchronize()
    L.reserve_host(n)
    t = time.perf_counter()
    L.pause("big", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    L.resume("big")
    ok = verify(x)
    result("pause-keep %d GiB (%s, after reserve_host): %.3f s, %.1f GB/s; contents "
           "bitwise equal after resume: %s" % (n >> 30, big, tp, gbps(n, tp), ok))
    if not ok:
        fail("contents changed across pause/resume with %s MiB handles" % big)


def part_graph():
    import libvmem as L
    L.install_torch()
    with L.region("g"):
        a = torch.randn(1 << 22, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b = a * 2 + 1
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            b = a * 2 + 1
    g.replay()
    torch.cuda.synchronize()
    before = b.clone()
    for keep in (True, False):
        L.pause("g", keep=keep, empty_cache=False)
        L.resume("g")
        if not keep:
            a.copy_(torch.randn(1 << 22, device="cuda", generator=torch.Generator("cuda").manual_seed(1)))
        g.replay()
        torch.cuda.synchronize()
        exp = a * 2 + 1
        ok = torch.equal(b, exp) and (not keep or torch.equal(b, before))
        result("CUDA graph captured before pause (%s) replays after resume: %s "
               "(graph memory held, freed: %s)"
               % ("keep" if keep else "discard", "ok" if ok else "WRONG", L.graph_memory()))
        if not ok:
            fail("graph replay after resume")


def part_capture():
    """An allocation during capture that grows the arena, and one that spills."""
    import libvmem as L
    L.install_torch()
    backend = os.environ.get("VMEM_BACKEND")
    for what, limit in (("growth", None), ("spill", 256 << 20)):
        try:
            if limit:
                L.set_limit(limit)
            x = torch.randn(1024, device="cuda")
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
                big.fill_(1)
                z = x * 2 + big[:4096].float().sum()
            g.replay()
            torch.cuda.synchronize()
            ok = torch.equal(z, x * 2 + 4096)
            result("capture on %s with %s during capture: %s (spills %d)"
                   % (backend, what, "ok" if ok else "WRONG", L.stats()["spills"]))
            if not ok:
                fail("capture %s result" % what)
        except Exception as e:  # noqa: BLE001 (report what failed)
            fail("capture on %s with %s: %s" % (backend, what, str(e).splitlines()[0]))
            return


ENGINE_B = r"""
import torch
free, total = torch.cuda.mem_get_info()
grab = torch.empty(int(free * 0.8), dtype=torch.uint8, device="cuda")
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = torch.nn.functional.cross_entropy(model(torch.randn(512, 4096, device="cuda")),
                                         torch.randint(0, 10, (512,), device="cuda"))
loss.backward(); opt.step(); torch.cuda.synchronize()
print(free, grab.numel(), float(loss))
"""


def part_colocate():
    import libvmem as L
    L.install_torch()
    torch.manual_seed(0)
    kv_gib = int(os.environ.get("KV_GIB", "16"))
    with L.region("A-weights"):
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda().eval()
    with L.region("A-kv"):  # the KV-cache pool
        kv = torch.empty(kv_gib * GiB // 4, device="cuda")
    tokens = kv[: 64 * 128 * 512].view(64, 128, 512)
    prompt = torch.randn(64, 128, 512)
    tokens.copy_(prompt)
    with L.region("A-graph"), torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(tokens)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model(tokens)
    g.replay()
    torch.cuda.synchronize()
    y0 = out.cpu()
    free0 = other_process_free()
    t = time.perf_counter()
    L.pause("A-kv", keep=False, empty_cache=False)
    L.pause("A-weights", keep=True, empty_cache=False)
    L.pause("A-graph", keep=True, empty_cache=False)
    tp = time.perf_counter() - t
    L.trim()
    s = L.stats()
    result("engine A paused in %.3f s; A's tags hold %s device bytes; instance deviceHeld %d"
           % (tp, [L.tag_stats(n)["device_held"] for n in ("A-weights", "A-kv", "A-graph")],
              s["deviceHeld"]))
    r = subprocess.run([sys.executable, "-c", ENGINE_B], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("VMEM_")})
    if r.returncode != 0:
        fail("engine B: " + r.stderr.strip().splitlines()[-1])
    else:
        free_b, grabbed, loss = r.stdout.split()
        result("engine B saw %.2f GiB free (%.2f GiB more than before A paused), held %.2f GiB "
               "and trained a step (loss %s)" % (int(free_b) / GiB, (int(free_b) - free0) / GiB,
                                                 int(grabbed) / GiB, loss))
    t = time.perf_counter()
    L.resume("A-weights")
    L.resume("A-graph")
    L.resume("A-kv")
    tr = time.perf_counter() - t
    tokens.copy_(prompt)  # the KV cache was discarded: filled again
    g.replay()
    torch.cuda.synchronize()
    same = torch.equal(out.cpu(), y0)
    result("engine A resumed in %.3f s; outputs bitwise equal: %s" % (tr, same))
    if not same:
        fail("engine A outputs differ after resume")


def part_tms():
    """torch_memory_saver (built from its public source by pause-bench.sh) on
    the same n bytes: keep (enable_cpu_backup=True) cold, i.e. the pinned
    backup allocated inside the pause as its default does, and warm (its
    retain_cpu_backup policy: the backup of the first pause is reused), each
    resumed and checked; then discard (no backup).  Its torch hook mode (a
    CUDAPluggableAllocator in a MemPool per tag), as libvmem's rows use
    PyTorch's allocator hook too."""
    from torch_memory_saver import torch_memory_saver as tms
    tms.hook_mode = "torch"  # a setter only: set before first use
    n = int(os.environ.get("PAUSE_GIB", "20")) * GiB
    with tms.region(tag="big", enable_cpu_backup=True):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
    for label in ("#1 cold: pinned backup allocated in the pause", "#2 warm: retain_cpu_backup"):
        fill(x)
        torch.cuda.synchronize()
        free0 = other_process_free()
        t = time.perf_counter()
        tms.pause("big")
        torch.cuda.synchronize()
        tp = time.perf_counter() - t
        free1 = other_process_free()
        tms.retain_cpu_backup = True  # read at resume: the backup stays for #2
        t = time.perf_counter()
        tms.resume("big")
        torch.cuda.synchronize()
        tr = time.perf_counter() - t
        ok = verify(x)
        result("torch_memory_saver pause-keep %s %d GiB: %.3f s, %.1f GB/s; resume %.3f s, "
               "%.1f GB/s; second process saw %.2f GiB more free; contents intact: %s"
               % (label, n >> 30, tp, gbps(n, tp), tr, gbps(n, tr), (free1 - free0) / GiB, ok))
        if not ok:
            fail("torch_memory_saver lost contents (%s)" % label)
    tms.retain_cpu_backup = False
    del x
    tms_discard(tms, n)
    tms_exit()


def tms_discard(tms, n):
    """torch_memory_saver's pause with discard (no backup) and resume,
    DISCARD_ROUNDS times (default 2), timed as discard() times libvmem's."""
    with tms.region(tag="d", enable_cpu_backup=False):
        y = torch.empty(n, dtype=torch.uint8, device="cuda")
    y.fill_(1)
    for i in range(int(os.environ.get("DISCARD_ROUNDS", "2"))):
        torch.cuda.synchronize()
        free0 = other_process_free()
        t = time.perf_counter()
        tms.pause("d")
        td = time.perf_counter() - t
        free1 = other_process_free()
        t = time.perf_counter()
        tms.resume("d")
        tr = time.perf_counter() - t
        result("torch_memory_saver pause-discard #%d %d GiB: %.1f ms (second process sees %.2f "
               "GiB more free); resume %.1f ms" % (i + 1, n >> 30, td * 1e3,
                                                  (free1 - free0) / GiB, tr * 1e3))
    del y


def part_tms_discard():
    """Only torch_memory_saver's discard rounds (pause-bench.sh alternates
    this part with libvmem's discard part, fresh processes each)."""
    from torch_memory_saver import torch_memory_saver as tms
    tms.hook_mode = "torch"
    tms_discard(tms, int(os.environ.get("PAUSE_GIB", "20")) * GiB)
    tms_exit()


def tms_exit():
    # torch_memory_saver's free hook crashes at interpreter teardown on this
    # stack ("only support interesting region", then SIGSEGV; H100 run 5),
    # after every figure above was printed: leave without the teardown.
    sys.stdout.flush()
    os._exit(1 if failed else 0)


{"bench": part_bench, "discard": part_discard, "graph": part_graph, "capture": part_capture,
 "colocate": part_colocate, "tms": part_tms, "tms-discard": part_tms_discard,
 "cold": part_cold}[PART]()
sys.exit(1 if failed else 0)
