"""Probe (thirty-third session): what does an optimizer step cost with its
state (AdamW's exp_avg and exp_avg_sq) read and written in place in mapped host memory,
against the same bytes offloaded out and back by copies? GPT-2 small's parameters (fp32).
Prints one line per case; medians of 10 steps after 3 warm-up steps, CUDA events."""
import statistics, sys
import torch, cupy
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).cuda()
params = [p for p in model.parameters() if p.requires_grad]
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
nbytes = sum(p.numel() * 4 for p in params)
print(f"params {len(params)} tensors, {nbytes/1e9:.3f} GB fp32; state 2x that", flush=True)

keep = []
def host_like(t):
    n = t.numel() * t.element_size()
    ptr = cupy.cuda.runtime.hostAlloc(n, cupy.cuda.runtime.hostAllocMapped)
    dptr = ptr  # UVA: mapped pinned memory has the same address on the device
    mem = cupy.cuda.UnownedMemory(dptr, n, None, 0)
    arr = cupy.ndarray(tuple(t.shape), cupy.float32, cupy.cuda.MemoryPointer(mem, 0))
    h = torch.as_tensor(arr, device="cuda")
    h.copy_(t)
    keep.append((ptr, arr))
    return h

def timed(fn, n=10, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts), min(ts), max(ts)

for kind in ("fused", "foreach"):
    opt = torch.optim.AdamW(params, lr=1e-4, **{kind: True})
    opt.step()  # makes the state on the device
    med, lo, hi = timed(opt.step)
    print(f"{kind:8s} state on device : {med:7.2f} ms (min {lo:.2f}, max {hi:.2f})", flush=True)
    moved = 0
    for p in params:
        st = opt.state[p]
        for k in ("exp_avg", "exp_avg_sq"):
            st[k] = host_like(st[k])
            moved += st[k].numel() * 4
    torch.cuda.synchronize()
    try:
        med2, lo2, hi2 = timed(opt.step)
        print(f"{kind:8s} state on host   : {med2:7.2f} ms (min {lo2:.2f}, max {hi2:.2f}); "
              f"{moved/1e9:.3f} GB of state; extra {med2-med:.2f} ms = {(med2-med)/(moved/1e9):.1f} ms per GB",
              flush=True)
    except Exception as e:  # noqa
        print(f"{kind:8s} state on host   : failed: {e}", flush=True)
    del opt
    torch.cuda.synchronize()
    for ptr, arr in keep:
        cupy.cuda.runtime.freeHost(ptr)
    keep.clear()
    torch.cuda.synchronize()

# The same bytes out and back by copies (pinned memory), one direction at a time: what the
# offload pays per GB when the link is the bottleneck.
gb = 1 << 30
d = torch.empty(gb // 4, device="cuda")
h = torch.empty(gb // 4, pin_memory=True)
out = timed(lambda: h.copy_(d, non_blocking=True))[0]
back = timed(lambda: d.copy_(h, non_blocking=True))[0]
print(f"copies 1 GiB: d2h {out:.2f} ms ({gb/out/1e6:.1f} GB/s), h2d {back:.2f} ms "
      f"({gb/back/1e6:.1f} GB/s); out and back {out+back:.2f} ms per GiB", flush=True)
